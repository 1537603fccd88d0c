#!/usr/bin/env python3
"""A batched /generate end to end, as SGLang users send it.

A tiny f32 Qwen3 model with the real Qwen3 tokenizer serves `text` and `input_ids` lists. The
answer must be a list in SGLang's order (every input once, then again for each further sample
of n), each item the same as the input sent alone (greedy). The request's `sampling_params` may
give one object per input, and `rid` one id per input. Streamed, each chunk names its `index`.
A list of one answers a list of one, and a rid list of the wrong length is a 400. A prompt list
on /v1/completions gives one choice per prompt. Exit 0 when every check passes.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from e2e_support import Checks, Server, make_tiny_model, script_args  # noqa: E402

TEXTS = ["The weather today", "Tiles on the floor", "Numbers: 1, 2, 3"]


def greedy(max_new_tokens=6):
    return {"temperature": 0, "max_new_tokens": max_new_tokens, "ignore_eos": True}


def main():
    tessera, workdir = script_args(__doc__)
    check = Checks()
    model = make_tiny_model(tessera, workdir)
    server = Server(tessera, model, [], os.path.join(workdir, "serve.log"))
    try:
        if not check("server ready", server.ready()):
            return check.report()
        alone = []
        for text in TEXTS:
            status, body = server.post("/generate", {"text": text, "sampling_params": greedy()})
            alone.append(body if status == 200 else {})
        status, batch = server.post("/generate", {"text": TEXTS, "sampling_params": greedy()})
        check("a text list answers a list, each item as sent alone",
              status == 200 and isinstance(batch, list) and
              [b["output_ids"] for b in batch] == [a.get("output_ids") for a in alone] and
              [b["text"] for b in batch] == [a.get("text") for a in alone], (status, batch, alone))

        ids = [[5, 6, 7, 8], [9, 10]]
        singles = [server.post("/generate", {"input_ids": p, "sampling_params": greedy(4)})[1] for p in ids]
        status, batch = server.post("/generate", {"input_ids": ids, "sampling_params": {**greedy(4), "n": 2}})
        order = [singles[0], singles[1], singles[0], singles[1]]
        check("input_ids lists with n 2: every input once, then again",
              status == 200 and isinstance(batch, list) and len(batch) == 4 and
              [b["output_ids"] for b in batch] == [s["output_ids"] for s in order], (status, batch))

        status, batch = server.post("/generate", {"text": TEXTS[:2], "rid": ["first", "second"],
                                                  "sampling_params": [greedy(2), greedy(5)]})
        check("sampling_params and a rid per input",
              status == 200 and [len(b["output_ids"]) for b in batch] == [2, 5] and
              [b["meta_info"]["id"] for b in batch] == ["first", "second"], (status, batch))

        status, batch = server.post("/generate", {"text": [TEXTS[0]], "sampling_params": greedy()})
        check("a list of one answers a list of one",
              status == 200 and isinstance(batch, list) and len(batch) == 1 and
              batch[0]["output_ids"] == alone[0].get("output_ids"), (status, batch))

        status, chunks = server.stream("/generate", {"text": TEXTS[:2], "sampling_params": greedy()})
        last = {}
        for chunk in chunks:
            last[chunk.get("index")] = chunk
        check("streamed, each chunk names its index and ends as sent alone",
              status == 200 and sorted(last) == [0, 1] and
              [last[i]["output_ids"] for i in (0, 1)] == [a.get("output_ids") for a in alone[:2]], (status, last))

        completion = {"model": "tiny", "max_tokens": 5, "temperature": 0}
        alone = [server.post("/v1/completions", {**completion, "prompt": t})[1] for t in TEXTS[:2]]
        status, body = server.post("/v1/completions", {**completion, "prompt": TEXTS[:2]})
        choices = body.get("choices", []) if status == 200 else []
        check("/v1/completions with a prompt list: one choice per prompt, in order",
              [c["index"] for c in choices] == [0, 1] and
              [c["text"] for c in choices] == [a["choices"][0]["text"] for a in alone], (status, body, alone))

        status, body = server.post("/generate", {"text": TEXTS, "rid": ["a", "b"], "sampling_params": greedy()})
        check("a rid list of the wrong length is a 400", status == 400 and "rid" in json.dumps(body), (status, body))
        status, body = server.post("/generate", {"text": TEXTS[:2], "sampling_params": [greedy()]})
        check("a sampling_params list of the wrong length is a 400", status == 400, (status, body))
        status, body = server.post("/generate", {"text": TEXTS[0], "sampling_params": greedy()})
        check("a single text still answers an object", status == 200 and isinstance(body, dict), body)
    finally:
        server.close()
    return check.report()


if __name__ == "__main__":
    sys.exit(main())
