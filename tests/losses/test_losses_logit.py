"""Logit kernels against independent float64 implementations written from the papers, and chunked vs naive."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from loss_fns import logit

N, H, V = 29, 6, 40


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


# ---- independent references (probability space, straight from the formulas) ----


def softmax_probs(z: torch.Tensor) -> torch.Tensor:
    e = torch.exp(z - z.max(-1, keepdim=True).values)
    return e / e.sum(-1, keepdim=True)


def kl_probs(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    return (p * torch.log(p / q)).sum(-1)


def paper_jsd(z_s, z_t, mask, beta, tau):
    """Agarwal et al. 2023 Eq. 1 / TRL GKD: β·KL(p_T‖M) + (1−β)·KL(p_S‖M), M = (1−β)p_S + βp_T; endpoints KL."""
    p_s, p_t = softmax_probs(z_s / tau), softmax_probs(z_t.detach() / tau)
    if beta == 0:
        per = kl_probs(p_t, p_s)
    elif beta == 1:
        per = kl_probs(p_s, p_t)
    else:
        m = (1 - beta) * p_s + beta * p_t
        per = beta * kl_probs(p_t, m) + (1 - beta) * kl_probs(p_s, m)
    return per[mask].sum() / mask.sum()


def paper_topk_tail(z_s, z_t, mask, k, beta, tau):
    """SDPO: student top-k ids, full-softmax probs there, plus a tail bucket 1 − Σ_k p, JSD on k+1 categories."""
    p_s, p_t = softmax_probs(z_s / tau), softmax_probs(z_t.detach() / tau)
    losses = []
    for i in range(z_s.shape[0]):
        if not mask[i]:
            continue
        ids = torch.argsort(p_s[i].detach(), descending=True)[:k]
        ps = torch.cat([p_s[i, ids], (1 - p_s[i, ids].sum()).reshape(1)])
        pt = torch.cat([p_t[i, ids], (1 - p_t[i, ids].sum()).reshape(1)])
        if beta == 0:
            losses.append(kl_probs(pt, ps))
        elif beta == 1:
            losses.append(kl_probs(ps, pt))
        else:
            m = (1 - beta) * ps + beta * pt
            losses.append(beta * kl_probs(pt, m) + (1 - beta) * kl_probs(ps, m))
    return torch.stack(losses).sum() / mask.sum()


def paper_taid(z_s, z_t, mask, t):
    """TAID: p_t = softmax((1−t)·sg[z_S] + t·z_T); loss = −Σ p_t log q_θ, mean over valid tokens."""
    target = softmax_probs((1 - t) * z_s.detach() + t * z_t.detach())
    per = -(target * torch.log(softmax_probs(z_s))).sum(-1)
    return per[mask].sum() / mask.sum()


def paper_dpo(logits, labels, mask, ref, beta):
    """DPO: −log σ(β[(Σ logπ(y_w) − ref_w) − (Σ logπ(y_l) − ref_l)]), mean over pairs."""
    probs = softmax_probs(logits)
    seq = torch.stack([torch.log(probs[s, mask[s], labels[s, mask[s]]]).sum() for s in range(labels.shape[0])])
    pairs = labels.shape[0] // 2
    margin = (seq[:pairs] - ref[:pairs]) - (seq[pairs:] - ref[pairs:])
    return torch.log1p(torch.exp(-beta * margin)).mean()


@pytest.fixture
def problem():
    g = torch.Generator().manual_seed(7)
    h = torch.randn(N, H, generator=g, dtype=torch.float64, requires_grad=True)
    w = (torch.randn(V, H, generator=g, dtype=torch.float64) * 0.7).requires_grad_()
    h_t = torch.randn(N, H, generator=g, dtype=torch.float64)
    w_t = torch.randn(V, H, generator=g, dtype=torch.float64) * 0.7
    mask = torch.rand(N, generator=g) > 0.25
    return h, w, h_t, w_t, mask


def grads(loss, *xs):
    return torch.autograd.grad(loss, xs)


@pytest.mark.parametrize("beta", [0.0, 0.3, 0.5, 1.0])
@pytest.mark.parametrize("tau", [1.0, 1.7])
def test_jsd_matches_paper_formula(problem, beta: float, tau: float) -> None:
    h, w, h_t, w_t, mask = problem
    expected = paper_jsd(h @ w.T, h_t @ w_t.T, mask, beta, tau)
    naive = logit.jsd_loss(h @ w.T, h_t @ w_t.T, mask, beta=beta, temperature=tau)
    fused = logit.fused_linear_jsd(h, w, h_t, w_t, mask, beta=beta, temperature=tau, chunk_size=4)
    g_exp, g_naive, g_fused = grads(expected, h, w), grads(naive, h, w), grads(fused, h, w)
    assert naive.item() == pytest.approx(expected.item(), rel=1e-10)
    assert fused.item() == pytest.approx(expected.item(), rel=1e-10)
    for a, b, c in zip(g_exp, g_naive, g_fused, strict=True):
        assert rel_err(b, a) < 1e-10 and rel_err(c, a) < 1e-10


def test_jsd_beta_endpoints_and_temperature(problem) -> None:
    h, w, h_t, w_t, mask = problem
    z_s, z_t = h @ w.T, h_t @ w_t.T
    p_s, p_t = softmax_probs(z_s), softmax_probs(z_t)
    fwd = kl_probs(p_t, p_s)[mask].mean()
    rev = kl_probs(p_s, p_t)[mask].mean()
    assert logit.jsd_loss(z_s, z_t, mask, beta=0.0).item() == pytest.approx(fwd.item(), rel=1e-12)
    assert logit.jsd_loss(z_s, z_t, mask, beta=1.0).item() == pytest.approx(rev.item(), rel=1e-12)
    assert fwd.item() != pytest.approx(rev.item(), rel=1e-3)
    # the mixture form vanishes at the endpoints (JSD(β) ≈ β·KL(p_T‖p_S)): the special case is a real jump
    tiny = logit.jsd_loss(z_s, z_t, mask, beta=1e-6).item()
    assert tiny == pytest.approx(1e-6 * fwd.item(), rel=1e-3)
    # temperature scales both sides' logits
    hot = logit.jsd_loss(z_s, z_t, mask, beta=0.5, temperature=2.0)
    assert hot.item() == pytest.approx(logit.jsd_loss(z_s / 2, z_t / 2, mask, beta=0.5).item(), rel=1e-12)
    assert hot.item() != pytest.approx(logit.jsd_loss(z_s, z_t, mask, beta=0.5).item(), rel=1e-3)
    # identical student and teacher: zero divergence for every β
    assert logit.jsd_loss(z_s, z_s, mask, beta=0.5).item() == pytest.approx(0.0, abs=1e-14)


def test_jsd_num_items_and_teacher_detached(problem) -> None:
    h, w, h_t, w_t, mask = problem
    h_t.requires_grad_()
    mean = logit.fused_linear_jsd(h, w, h_t, w_t, mask, chunk_size=8)
    summed = logit.fused_linear_jsd(h, w, h_t, w_t, mask, num_items=1, chunk_size=8)
    assert summed.item() == pytest.approx(mean.item() * int(mask.sum()), rel=1e-12)
    summed.backward()
    assert h_t.grad is None and h.grad is not None
    assert torch.count_nonzero(h.grad[~mask]) == 0


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0])
def test_topk_tail_matches_sdpo_formula(problem, beta: float) -> None:
    h, w, h_t, w_t, mask = problem
    expected = paper_topk_tail(h @ w.T, h_t @ w_t.T, mask, k=5, beta=beta, tau=1.3)
    naive = logit.topk_tail_loss(h @ w.T, h_t @ w_t.T, mask, k=5, beta=beta, temperature=1.3)
    fused = logit.fused_linear_topk_tail(h, w, h_t, w_t, mask, k=5, beta=beta, temperature=1.3, chunk_size=4)
    assert naive.item() == pytest.approx(expected.item(), rel=1e-10)
    assert fused.item() == pytest.approx(expected.item(), rel=1e-10)
    for a, c in zip(grads(expected, h, w), grads(fused, h, w), strict=True):
        assert rel_err(c, a) < 1e-9


def test_topk_full_support_equals_full_jsd(problem) -> None:
    h, w, h_t, w_t, mask = problem
    full = logit.jsd_loss(h @ w.T, h_t @ w_t.T, mask, beta=0.5)
    renorm = logit.topk_tail_loss(h @ w.T, h_t @ w_t.T, mask, k=V, beta=0.5, add_tail=False)
    assert renorm.item() == pytest.approx(full.item(), rel=1e-10)


def test_taid_matches_paper_formula(problem) -> None:
    h, w, h_t, w_t, mask = problem
    for t in (0.0, 0.4, 1.0):
        expected = paper_taid(h @ w.T, h_t @ w_t.T, mask, t)
        fused = logit.fused_linear_taid(h, w, h_t, w_t, t=t, mask=mask, chunk_size=4)
        assert fused.item() == pytest.approx(expected.item(), rel=1e-10)
        for a, c in zip(grads(expected, h, w), grads(fused, h, w), strict=True):
            torch.testing.assert_close(c, a, rtol=1e-9, atol=1e-12)
            if t == 0.0:  # the target is the detached student itself: zero gradient
                assert float(c.abs().max()) < 1e-12


def test_dpo_matches_paper_formula() -> None:
    g = torch.Generator().manual_seed(3)
    hidden = torch.randn(4, 7, H, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(V, H, generator=g, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, V, (4, 7), generator=g)
    mask = torch.rand(4, 7, generator=g) > 0.3
    ref = torch.randn(4, generator=g, dtype=torch.float64) * 3
    expected = paper_dpo(hidden @ w.T, labels, mask, ref, beta=0.1)
    naive = logit.dpo_loss_from_logits(hidden @ w.T, labels, mask, ref, beta=0.1)
    fused = logit.fused_linear_dpo(hidden, w, labels, mask, ref, beta=0.1, chunk_size=5)
    assert naive.item() == pytest.approx(expected.item(), rel=1e-12)
    assert fused.item() == pytest.approx(expected.item(), rel=1e-12)
    for a, c in zip(grads(expected, hidden, w), grads(fused, hidden, w), strict=True):
        assert rel_err(c, a) < 1e-10
    # equal margins → log 2
    zero = logit.dpo_sigmoid_loss(torch.zeros(3), torch.zeros(3), torch.zeros(3), torch.zeros(3))
    assert zero.item() == pytest.approx(math.log(2.0))


@pytest.mark.parametrize("kernel", ["jsd", "topk", "taid"])
def test_chunked_vs_naive_float32(kernel: str) -> None:
    g = torch.Generator().manual_seed(11)
    n, hid, vocab = 300, 32, 1000
    h = torch.randn(n, hid, generator=g, requires_grad=True)
    w = (torch.randn(vocab, hid, generator=g) * 0.2).requires_grad_()
    h_t, w_t = torch.randn(n, hid, generator=g), torch.randn(vocab, hid, generator=g) * 0.2
    mask = torch.rand(n, generator=g) > 0.1
    if kernel == "jsd":
        naive = logit.jsd_loss(h @ w.T, h_t @ w_t.T, mask, beta=0.5, temperature=1.1)
        fused = logit.fused_linear_jsd(h, w, h_t, w_t, mask, beta=0.5, temperature=1.1, chunk_size=64)
    elif kernel == "topk":
        naive = logit.topk_tail_loss(h @ w.T, h_t @ w_t.T, mask, k=20, beta=1.0)
        fused = logit.fused_linear_topk_tail(h, w, h_t, w_t, mask, k=20, beta=1.0, chunk_size=64)
    else:
        naive = logit.taid_loss(h @ w.T, h_t @ w_t.T, t=0.4, mask=mask)
        fused = logit.fused_linear_taid(h, w, h_t, w_t, t=0.4, mask=mask, chunk_size=64)
    assert fused.item() == pytest.approx(naive.item(), rel=1e-5)
    for a, c in zip(grads(naive, h, w), grads(fused, h, w), strict=True):
        assert rel_err(c, a) < 1e-5


class _MaxNumel(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, torch.Tensor):
                self.shapes.append(tuple(t.shape))
        return out


def test_fused_never_allocates_tokens_by_vocab() -> None:
    n, hid, vocab, chunk = 64, 4, 50, 8
    h = torch.randn(n, hid, requires_grad=True)
    w = torch.randn(vocab, hid, requires_grad=True)
    h_t, w_t = torch.randn(n, hid), torch.randn(vocab, hid)
    with _MaxNumel() as mode:
        logit.fused_linear_jsd(h, w, h_t, w_t, beta=0.5, chunk_size=chunk).backward()
    largest = max(math.prod(s) for s in mode.shapes)
    assert largest <= chunk * vocab < n * vocab
    with _MaxNumel() as naive_mode:
        logit.jsd_loss(h @ w.T, h_t @ w_t.T, beta=0.5).backward()
    assert max(math.prod(s) for s in naive_mode.shapes) >= n * vocab  # the probe does see a [N, V] tensor


def test_taid_schedule_and_checkpoint() -> None:
    sched = logit.TAIDSchedule(num_train_steps=100, t_start=0.4, t_end=1.0, alpha=5e-4, beta=0.99)
    assert sched.update(2.0, global_step=0) == 0.4  # first call only records the loss
    t1 = sched.update(1.0, global_step=1)
    momentum = 0.01 * 0.5  # (1 − β)·rel with rel = (2 − 1)/2
    expected = max(0.4 + 0.006 * 1, 0.4 + 5e-4 / (1 + math.exp(-momentum)) * 0.6)
    assert t1 == pytest.approx(expected, rel=1e-12)  # the linear floor (0.406) dominates here
    fast = logit.TAIDSchedule(num_train_steps=10**9, alpha=0.5)
    fast.update(2.0, 0)
    assert fast.update(1.0, 1) == pytest.approx(0.4 + 0.5 / (1 + math.exp(-0.005)) * 0.6, rel=1e-12)
    assert fast.update(1.5, 2) >= fast.t - 1e-15  # monotone even when the loss rises
    ts = [fast.t]
    for step, loss in enumerate([1.4, 1.3, 1.6], start=3):
        ts.append(fast.update(loss, step))
    assert ts == sorted(ts) and ts[-1] <= 1.0
    resumed = logit.TAIDSchedule(num_train_steps=5)
    resumed.load_state_dict(fast.state_dict())
    assert resumed.state_dict() == fast.state_dict()
    assert resumed.update(1.2, 7) == fast.update(1.2, 7)
    fixed = logit.TAIDSchedule(num_train_steps=10, adaptive=False)
    assert fixed.update(1.0, 5) == pytest.approx(0.7)
    with pytest.raises(KeyError):
        fixed.load_state_dict({"bogus": 1})


def test_fused_gradient_scales_with_upstream_gradient(problem) -> None:
    h, w, h_t, w_t, mask = problem
    scaled = 3.0 * logit.fused_linear_jsd(h, w, h_t, w_t, mask, chunk_size=4) + 1.0
    reference = 3.0 * logit.jsd_loss(h @ w.T, h_t @ w_t.T, mask) + 1.0
    for a, c in zip(grads(reference, h, w), grads(scaled, h, w), strict=True):
        assert rel_err(c, a) < 1e-12
