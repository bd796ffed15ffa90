"""Typed ``[trainer.loss.kwargs]``: CLI strings coerced, unknown names and bad values rejected naming the TOML key,
validation done once per distinct kwargs, and each model documented field by field."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch
from test_losses_policy import ADVS, RATIOS, make_inputs

from loss_fns import composer, distill, kwargs, policy

LOSSES = {**policy.OBJECTIVES, "self_distill": distill.self_distill, "composer_loss": composer.composer_loss}


def test_cli_string_is_coerced_and_gives_the_same_loss_bit_for_bit() -> None:
    typed = policy.dapo(make_inputs(RATIOS, ADVS), clip_high=0.5, length_norm=True)
    cli = policy.dapo(make_inputs(RATIOS, ADVS), clip_high="0.5", length_norm="true")
    assert torch.equal(typed.loss, cli.loss)
    assert cli.loss.item() != policy.dapo(make_inputs(RATIOS, ADVS)).loss.item()  # the value did arrive


def test_none_string_unsets_an_optional_kwarg() -> None:
    assert kwargs.resolve(distill.SelfDistillKwargs, {"is_clip": "None"}) == {"is_clip": None, "scale": 1.0}
    with pytest.raises(kwargs.LossKwargsError, match=r"^trainer\.loss\.kwargs\.scale: Input should be a valid number"):
        kwargs.resolve(distill.SelfDistillKwargs, {"scale": "None"})


def test_unknown_kwarg_names_the_toml_key() -> None:
    with pytest.raises(kwargs.LossKwargsError) as info:
        policy.dr_grpo(make_inputs(RATIOS, ADVS), clip_hgih=0.28)
    assert str(info.value) == "trainer.loss.kwargs.clip_hgih: unknown setting (allowed: clip_low, clip_high, scale)"


@pytest.mark.parametrize(
    ("fn", "name", "value", "problem"),
    [
        (policy.ppo_clip, "clip_low", 1.5, "Input should be less than 1"),
        (policy.dapo, "clip_high", "-0.1", "Input should be greater than or equal to 0"),
        (policy.gspo, "variant", "tokens", "Input should be 'sequence' or 'token'"),
        (policy.cispo, "ratio_max", 0, "Input should be greater than 0"),
        (distill.self_distill, "is_clip", "abc", "Input should be a valid number"),
    ],
)
def test_bad_value_names_the_key_and_the_value(fn, name: str, value, problem: str) -> None:
    with pytest.raises(ValueError) as info:
        fn(make_inputs(RATIOS, ADVS), **{name: value})
    assert str(info.value).startswith(f"trainer.loss.kwargs.{name}: {problem}")
    assert str(info.value).endswith(f"(got {value!r})")


def test_composer_objective_kwargs_are_checked_by_the_objective_model() -> None:
    inputs = make_inputs(RATIOS, ADVS)
    with pytest.raises(kwargs.LossKwargsError, match=r"^trainer\.loss\.kwargs\.objective_kwargs\.clip_hgih: unknown"):
        composer.composer_loss(inputs, objective="dapo", objective_kwargs={"clip_hgih": 0.3})
    out = composer.composer_loss(inputs, objective="dapo", objective_kwargs={"clip_high": "0.5"})
    assert torch.equal(out.loss, policy.dapo(make_inputs(RATIOS, ADVS), clip_high=0.5).loss)


def test_cross_field_check_names_the_fields() -> None:
    with pytest.raises(
        ValueError, match=r"^trainer\.loss\.kwargs: Value error, ratio_min \(3\.0\) must be <= ratio_max"
    ):
        policy.cispo(make_inputs(RATIOS, ADVS), ratio_min=3, ratio_max="2")


def test_validation_runs_once_per_distinct_kwargs(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict] = []
    real = kwargs.validate_kwargs

    def counting(model, values, prefix=kwargs.KWARGS_KEY):
        calls.append(dict(values))
        return real(model, values, prefix)

    monkeypatch.setattr(kwargs, "_CACHE", {})
    monkeypatch.setattr(kwargs, "validate_kwargs", counting)
    for _ in range(5):  # prime-rl calls the loss once per sequence with the same kwargs
        policy.dapo(make_inputs(RATIOS, ADVS), clip_high="0.28", scale=2.0)
    assert calls == [{"clip_high": "0.28", "scale": 2.0}]
    policy.dapo(make_inputs(RATIOS, ADVS), clip_high=0.28, scale=2.0)  # equal value, other type: validated anew
    assert len(calls) == 2


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_every_field_is_documented_and_the_signature_shows_the_model(name: str) -> None:
    fn = LOSSES[name]
    model = fn.kwargs_model
    assert model.model_config["extra"] == "forbid"
    for field_name, field in model.model_fields.items():
        assert field.description, f"{model.__name__}.{field_name} has no docstring"
    params = inspect.signature(fn).parameters
    assert list(params)[1:] == list(model.model_fields)
    assert all(params[n].default == f.get_default() for n, f in model.model_fields.items())


DOCUMENTED = {
    "loss_fns.policy.ppo_clip": policy.ppo_clip,
    "loss_fns.policy.dr_grpo": policy.dr_grpo,
    "loss_fns.policy.dapo": policy.dapo,
    "loss_fns.policy.gspo": policy.gspo,
    "loss_fns.policy.cispo": policy.cispo,
    "loss_fns.distill.self_distill": distill.self_distill,
    "loss_fns.composer.composer_loss": composer.composer_loss,
}


def _range(field) -> str:
    bounds = []
    for meta in field.metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            if getattr(meta, attr, None) is not None:
                bounds.append(f"{sign} {getattr(meta, attr):g}")
    return ", ".join(bounds) or "-"


def kwargs_table_rows() -> list[str]:
    """docs/running.md's kwargs table, one markdown row per (loss, kwarg), from the models themselves."""
    rows = []
    for path, fn in DOCUMENTED.items():
        for name, field in fn.kwargs_model.model_fields.items():
            meaning = field.description.replace("``", "`")
            rows.append(f"| `{path}` | `{name}` | `{field.get_default()!r}` | {_range(field)} | {meaning} |")
    return rows


def test_docs_kwargs_table_is_the_models() -> None:
    assert set(DOCUMENTED.values()) == set(LOSSES.values())
    docs = (Path(__file__).resolve().parents[2] / "docs" / "running.md").read_text()
    start = docs.index("| `import_path` | kwarg | default | range | meaning |")
    table = docs[start:].split("\n\n", 1)[0].splitlines()[2:]
    assert table == kwargs_table_rows()


def test_kwargs_error_is_on_the_error_base_and_loads_no_cli() -> None:
    import subprocess
    import sys

    from crf_prime.errors import ExitCode, InputError

    assert issubclass(kwargs.LossKwargsError, InputError) and issubclass(kwargs.LossKwargsError, ValueError)
    assert kwargs.LossKwargsError.exit_code == ExitCode.BAD_INPUT
    probe = "import sys, loss_fns.composer; print(sorted(m for m in sys.modules if m.startswith('crf_prime')))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "['crf_prime', 'crf_prime.errors']"
