"""Stand-in for prime-rl's vLLM inference server on loopback, speaking the routes prime-rl's orchestrator and the
verifiers renderer client use (read from prime_rl/utils/client.py, orchestrator/inference_metrics.py and
renderers/client.py at prime-rl 559b447):

- ``POST /inference/v1/generate`` -- vLLM's token-in/token-out API (request and response validated with vLLM's own
  ``GenerateRequest``/``GenerateResponse`` models). ``--policy sample`` (default): the tiny model itself samples the
  completion with the request's temperature, top-p, max_tokens and stop tokens, and returns the logprob of every
  sampled token (sampling.py); ``--policy script``: the scripted policy's completion (policy.py, known plans for the
  plumbing checks) with its logprobs under the *current* weights. ``prompt_logprobs`` requests (opsd's teacher
  scoring) return the model's logprob of every prompt token;
- ``POST /v1/chat/completions`` -- what prime-rl's eval client calls (plain chat completions, no renderer): the
  messages through the tokenizer's ChatML template, then the sampling policy (text replies); with ``--policy script``
  the scripted policy's turn, its tool calls as OpenAI tool calls;
- ``GET /health``, ``GET /v1/models`` (with ``max_model_len``), ``GET /metrics`` (Prometheus text);
- admin: ``POST /pause``, ``POST /resume``, ``POST /update_weights`` (loads the trainer's broadcast safetensors).

Every completion is appended to ``--log`` (JSONL) with its plan and whether it is an error turn.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import threading
import time
import uuid
from pathlib import Path

import torch
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from policy import FeatdelScript, ReplayScript, SweScript, Turn, chatml, messages_of, split_tool_calls
from sampling import sample
from transformers import AutoModelForCausalLM, AutoTokenizer
from vllm.entrypoints.scale_out.token_in_token_out.protocol import GenerateRequest, GenerateResponse
from weights import weights_digest


class Engine:
    """The tiny model, its tokenizer, the scripted policy and the admin state."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.model_name = args.served_model_name
        self.tokenizer = AutoTokenizer.from_pretrained(args.model)
        self.model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
        self.max_model_len = args.max_model_len
        self.featdel = FeatdelScript(Path(args.tasks)) if args.tasks else None
        self.replay = ReplayScript(Path(args.states), Path(args.journal)) if args.states else None
        self.swe = SweScript(Path(args.swe_instances)) if args.swe_instances else None
        self.rng = random.Random(args.seed)
        self.policy = args.policy
        self.generator = torch.Generator().manual_seed(args.seed)
        self.lock = threading.Lock()
        self.paused = False
        self.version = 0
        self.weight_dir: str | None = None
        self.running = 0
        self.log = open(args.log, "a", buffering=1)  # noqa: SIM115 -- lives as long as the server

    @torch.no_grad()
    def logprobs(self, ids: list[int], temperature: float = 1.0) -> list[float]:
        """log p(ids[i] | ids[:i]) for i >= 1 under the current weights (index 0 gets 0.0)."""
        x = torch.tensor([ids])
        logits = self.model(input_ids=x).logits[0, :-1].float() / max(temperature, 1e-6)
        lp = torch.log_softmax(logits, dim=-1).gather(-1, x[0, 1:, None])[:, 0]
        return [0.0, *lp.tolist()]

    def script(self, prompt_text: str) -> Turn:
        history = messages_of(prompt_text)
        with self.lock:
            if self.swe is not None:
                swe_row = self.swe.row_for(prompt_text)
                if swe_row is not None:
                    return self.swe.next_turn(swe_row, history, self.rng)
            if self.featdel is not None:
                row = self.featdel.row_for(prompt_text)
                if row is not None:
                    return self.featdel.next_turn(row, history, self.rng)
            if self.replay is not None:
                state = self.replay.state_for(history)
                if state is not None:
                    return self.replay.next_turn(state, self.rng)
        return Turn("I cannot tell what this task is.", "unknown_prompt", None)

    def load_weights(self, weight_dir: str) -> None:
        from safetensors.torch import load_file

        state: dict[str, torch.Tensor] = {}
        for f in sorted(Path(weight_dir).glob("*.safetensors")):
            state.update(load_file(f))
        if not state:
            raise FileNotFoundError(f"no safetensors in {weight_dir}")
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        if unexpected or [m for m in missing if m != "lm_head.weight"]:
            raise ValueError(f"weights in {weight_dir} do not fit the model: {missing=} {unexpected=}")


def build_app(engine: Engine) -> FastAPI:
    app = FastAPI()

    @app.get("/health")
    async def health() -> dict:
        return {}

    @app.get("/v1/models")
    async def models() -> dict:
        card = {
            "id": engine.model_name,
            "object": "model",
            "owned_by": "rehearsal",
            "max_model_len": engine.max_model_len,
        }
        return {"object": "list", "data": [card]}

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        text = (
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{engine="0",model_name="{engine.model_name}"}} {engine.running}\n'
            "# TYPE vllm:num_requests_waiting gauge\n"
            f'vllm:num_requests_waiting{{engine="0",model_name="{engine.model_name}"}} 0\n'
        )
        return PlainTextResponse(text)

    @app.post("/pause")
    async def pause() -> dict:
        engine.paused = True
        return {}

    @app.post("/resume")
    async def resume() -> dict:
        engine.paused = False
        return {}

    @app.post("/update_weights")
    async def update_weights(request: Request) -> dict:
        body = await request.json()
        weight_dir = body.get("weight_dir")
        if weight_dir:
            with engine.lock:
                engine.load_weights(weight_dir)
                engine.weight_dir = weight_dir
                engine.version += 1
            # what was loaded, so a relayed run can show it is the trainer's step, byte for byte
            record = {"time": time.time(), "update": weight_dir, "version": engine.version}
            record["sha256"] = weights_digest(Path(weight_dir))
            engine.log.write(json.dumps(record) + "\n")
        return {}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> JSONResponse:
        body = await request.json()
        if engine.paused:
            return JSONResponse({"error": "engine paused"}, status_code=503)
        engine.running += 1
        try:
            return JSONResponse(_chat(engine, body) if engine.policy == "sample" else _chat_script(engine, body))
        finally:
            engine.running -= 1

    @app.post("/inference/v1/generate")
    async def generate(request: Request) -> JSONResponse:
        req = GenerateRequest.model_validate(await request.json())
        if engine.paused:
            return JSONResponse({"error": "engine paused"}, status_code=503)
        engine.running += 1
        try:
            body = _generate(engine, req)
        finally:
            engine.running -= 1
        return JSONResponse(GenerateResponse.model_validate(body).model_dump(mode="json", exclude_none=True))

    return app


def _generate(engine: Engine, req: GenerateRequest) -> dict:
    sp = req.sampling_params
    prompt = list(req.token_ids)
    rid = req.request_id or uuid.uuid4().hex
    if sp.prompt_logprobs is not None:
        with engine.lock:
            lps = engine.logprobs(prompt)
        head = engine.tokenizer.decode(prompt[:256], skip_special_tokens=False)
        # opsd's teacher scoring: the hint, rendered as a leading system message, then the sample's own tokens
        record = {"time": time.time(), "version": engine.version, "score": True, "prompt_len": len(prompt)}
        record["system_head"] = head.removeprefix("<|im_start|>system\n")[:200]
        engine.log.write(json.dumps(record) + "\n")
        prompt_logprobs = [None] + [
            {str(t): {"logprob": lp, "rank": 1, "decoded_token": None}}
            for t, lp in zip(prompt[1:], lps[1:], strict=True)
        ]
        return {"request_id": rid, "model": engine.model_name, "choices": [], "prompt_logprobs": prompt_logprobs}
    stop = list(sp.stop_token_ids or []) or [engine.tokenizer.convert_tokens_to_ids("<|im_end|>")]
    if engine.policy == "sample":
        max_tokens = sp.max_tokens or max(1, engine.max_model_len - len(prompt))
        with engine.lock:
            drawn = sample(
                engine.model,
                prompt,
                max_tokens=max_tokens,
                temperature=sp.temperature if sp.temperature is not None else 1.0,
                top_p=sp.top_p if sp.top_p is not None else 1.0,
                stop_ids=set(stop),
                generator=engine.generator,
            )
        completion, lps, finish = drawn.token_ids, drawn.logprobs, drawn.finish_reason
        turn = Turn(engine.tokenizer.decode(completion, skip_special_tokens=True), "sampled", None)
    else:
        turn = engine.script(engine.tokenizer.decode(prompt, skip_special_tokens=False))
        completion = engine.tokenizer.encode(turn.text, add_special_tokens=False)
        finish = "stop"
        if sp.max_tokens is not None and len(completion) >= sp.max_tokens:
            completion, finish = completion[: sp.max_tokens], "length"
        else:
            completion.append(stop[0])
        with engine.lock:
            lps = engine.logprobs(prompt + completion, temperature=sp.temperature or 1.0)[len(prompt) :]
    if not all(math.isfinite(x) for x in lps):
        raise ValueError("non-finite logprob from the tiny model")
    engine.log.write(
        json.dumps(
            {
                "time": time.time(),
                "version": engine.version,
                "plan": turn.plan,
                "error": turn.error,
                "completion_ids": completion,
                "completion_logprobs": lps,
                "text": turn.text if engine.policy == "sample" else None,
                "prompt_len": len(prompt),
            }
        )
        + "\n"
    )
    content = [{"token": f"token_id:{t}", "logprob": lp} for t, lp in zip(completion, lps, strict=True)]
    choice = {"index": 0, "token_ids": completion, "logprobs": {"content": content}, "finish_reason": finish}
    return {"request_id": rid, "model": engine.model_name, "choices": [choice]}


def _chat_script(engine: Engine, body: dict) -> dict:
    """One chat completion from the scripted policy (prime-rl's eval client: no renderer, tools as OpenAI tool calls)."""
    turn = engine.script(chatml(body["messages"]))
    content, calls = split_tool_calls(turn.text)
    record = {"time": time.time(), "version": engine.version, "chat": True, "plan": turn.plan, "error": turn.error}
    engine.log.write(json.dumps(record) + "\n")
    tool_calls = [
        {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function", "function": {"name": n, "arguments": a}}
        for n, a in calls
    ]
    message = {"role": "assistant", "content": content or None, **({"tool_calls": tool_calls} if tool_calls else {})}
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop", "logprobs": None}
    tokens = len(engine.tokenizer.encode(turn.text, add_special_tokens=False))
    return _completion(engine, choice, prompt_tokens=0, completion_tokens=tokens)


def _chat(engine: Engine, body: dict) -> dict:
    """One OpenAI chat completion sampled from the tiny model (text only; no tools)."""
    messages = [{"role": m["role"], "content": m.get("content") or ""} for m in body["messages"]]
    text = engine.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    prompt = engine.tokenizer.encode(text, add_special_tokens=False)
    end = engine.tokenizer.convert_tokens_to_ids("<|im_end|>")
    max_tokens = (
        body.get("max_completion_tokens") or body.get("max_tokens") or max(1, engine.max_model_len - len(prompt))
    )
    temperature = body.get("temperature")
    with engine.lock:
        drawn = sample(
            engine.model,
            prompt,
            max_tokens=int(max_tokens),
            temperature=1.0 if temperature is None else float(temperature),
            top_p=float(body.get("top_p") or 1.0),
            stop_ids={end},
            generator=engine.generator,
        )
    text = engine.tokenizer.decode(drawn.token_ids, skip_special_tokens=True)
    engine.log.write(json.dumps({"time": time.time(), "version": engine.version, "chat": True, "text": text}) + "\n")
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": text},
        "finish_reason": drawn.finish_reason,
        "logprobs": None,
    }
    return _completion(engine, choice, prompt_tokens=len(prompt), completion_tokens=len(drawn.token_ids))


def _completion(engine: Engine, choice: dict, *, prompt_tokens: int, completion_tokens: int) -> dict:
    """An OpenAI ``chat.completion`` object around one choice, with its token usage."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": engine.model_name,
        "choices": [choice],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True, help="tiny model directory")
    parser.add_argument("--served-model-name", required=True, help="name the orchestrator asks for (model.name)")
    parser.add_argument("--ports", type=int, nargs="+", required=True, help="router and backend (admin) ports")
    parser.add_argument("--max-model-len", type=int, default=8192)
    parser.add_argument("--tasks", help="Feature Deletion tasks.jsonl the policy solves")
    parser.add_argument("--states", help="trace-replay states.jsonl")
    parser.add_argument("--journal", help="trace-replay journal.jsonl")
    parser.add_argument("--swe-instances", help="SWE-bench instances.jsonl the policy solves (the mini fixture)")
    parser.add_argument(
        "--policy",
        choices=("sample", "script"),
        default="sample",
        help="sample: the tiny model generates; script: policy.py's scripted completions (known plans)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log", required=True, help="JSONL of every completion (plan, error turn)")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("CRF_REHEARSAL_THREADS", "1")))
    engine = Engine(args)
    app = build_app(engine)
    servers = [
        uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")) for port in args.ports
    ]
    threads = [threading.Thread(target=s.run, daemon=True) for s in servers[1:]]
    for t in threads:
        t.start()
    servers[0].run()


if __name__ == "__main__":
    main()
