#!/usr/bin/env python3
"""SGLang's sessions end to end: /open_session, /generate with session_params, /close_session.

A tiny f32 Qwen3 model with the real Qwen3 tokenizer, greedy. A second turn that continues the
first (session_params rid) must answer what /generate answers for the first turn's prompt and
output followed by the second turn's text, sent whole; and its prompt must come from the
prefix cache. drop_previous_output and offset cut the earlier tokens as SGLang does, replace
drops the branch that followed. The refusals speak SGLang's words: an unknown session or rid,
a duplicate id, a streaming session, a closed session. Exit 0 when every check passes.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from e2e_support import Checks, Server, make_tiny_model, script_args  # noqa: E402

GREEDY = {"temperature": 0, "max_new_tokens": 5, "ignore_eos": True}


def generate(server, body):
    status, answer = server.post("/generate", {"sampling_params": GREEDY, **body})
    return status, answer if isinstance(answer, dict) else {"raw": answer}


def ids_of(server, text):
    """The tokens /generate reads for `text` (the prompt's log-probability entries)."""
    status, answer = generate(server, {"text": text, "return_logprob": True, "logprob_start_len": 0,
                                       "sampling_params": {"max_new_tokens": 0}})
    return [e[1] for e in answer["meta_info"]["input_token_logprobs"]] if status == 200 else None


def error_text(answer):
    return answer.get("error", {}).get("message", "") if isinstance(answer, dict) else str(answer)


def main():
    tessera, workdir = script_args(__doc__)
    check = Checks()
    model = make_tiny_model(tessera, workdir)
    server = Server(tessera, model, [], os.path.join(workdir, "serve.log"))
    try:
        if not check("server ready", server.ready()):
            return check.report()
        status, sid = server.post("/open_session", {"capacity_of_str_len": 1000})
        check("/open_session answers an id", status == 200 and isinstance(sid, str) and len(sid) == 32, (status, sid))

        status, first = generate(server, {"text": "The weather today", "session_params": {"id": sid}})
        check("a first turn", status == 200 and len(first.get("output_ids", [])) == 5, first)
        rid = first["meta_info"]["id"]
        prompt1 = ids_of(server, "The weather today")
        second_text = " and tomorrow"
        status, second = generate(server, {"text": second_text, "session_params": {"id": sid, "rid": rid}})
        whole = prompt1 + first["output_ids"] + ids_of(server, second_text)
        status_whole, expected = generate(server, {"input_ids": whole})
        check("the second turn answers what the whole conversation sent at once answers",
              status == 200 and status_whole == 200 and second["output_ids"] == expected["output_ids"] and
              second["meta_info"]["prompt_tokens"] == len(whole), (second, expected, len(whole)))
        check("its earlier turn comes from the prefix cache",
              second.get("meta_info", {}).get("cached_tokens", 0) >= len(prompt1), second.get("meta_info"))

        status, dropped = generate(server, {"text": second_text,
                                            "session_params": {"id": sid, "rid": rid, "drop_previous_output": True}})
        _, expected = generate(server, {"input_ids": prompt1 + ids_of(server, second_text)})
        check("drop_previous_output continues from the earlier prompt alone",
              status == 200 and dropped["output_ids"] == expected["output_ids"], (dropped, expected))
        status, cut = generate(server, {"text": second_text, "session_params": {"id": sid, "rid": rid, "offset": -2}})
        _, expected = generate(server, {"input_ids": (prompt1 + first["output_ids"])[:-2] + ids_of(server, second_text)})
        check("offset -2 cuts the earlier tokens as a Python slice",
              status == 200 and cut["output_ids"] == expected["output_ids"], (cut, expected))

        # replace: the branch after `rid` goes; the second turn can no longer be continued.
        second_rid = second["meta_info"]["id"]
        status, _ = generate(server, {"text": " again", "session_params": {"id": sid, "rid": rid, "replace": True}})
        status_old, old = generate(server, {"text": "x", "session_params": {"id": sid, "rid": second_rid}})
        check("replace drops the turns that followed", status == 200 and status_old == 400 and
              "Invalid request session id" in error_text(old), (status, status_old, old))

        status, answer = generate(server, {"text": "x", "session_params": {"id": "nope"}})
        check("an unknown session is a 400 in SGLang's words",
              status == 400 and "Invalid request: session id nope does not exist" in error_text(answer), answer)
        status, answer = server.post("/open_session", {"capacity_of_str_len": 10, "session_id": sid})
        check("a duplicate session id is a 400",
              status == 400 and "Check if a session with the same id is still open" in error_text(answer), answer)
        status, answer = server.post("/open_session", {"capacity_of_str_len": 10, "streaming": True})
        check("a streaming session names --enable-streaming-session",
              status == 400 and "--enable-streaming-session" in error_text(answer), answer)
        status, named = server.post("/open_session", {"capacity_of_str_len": 10, "session_id": "mine"})
        check("a session under the client's id", status == 200 and named == "mine", (status, named))

        status, _ = server.post("/close_session", {"session_id": sid})
        status_after, answer = generate(server, {"text": "x", "session_params": {"id": sid, "rid": rid}})
        check("a closed session takes no more turns", status == 200 and status_after == 400, (status_after, answer))
        status, _ = server.post("/close_session", {"session_id": "never-opened"})
        check("closing an unknown session is no error (as SGLang)", status == 200, status)
    finally:
        server.close()
    return check.report()


if __name__ == "__main__":
    sys.exit(main())
