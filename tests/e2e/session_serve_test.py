#!/usr/bin/env python3
"""SGLang's sessions end to end: /open_session, /generate with session_params, /close_session.

A tiny f32 Qwen3 model with the real Qwen3 tokenizer, greedy. A second turn that continues the
first (session_params rid) must answer what /generate answers for the first turn's prompt and
output followed by the second turn's text, sent whole; and its prompt must come from the
prefix cache. drop_previous_output and offset cut the earlier tokens as SGLang does, replace
drops the branch that followed. The refusals speak SGLang's words: an unknown session or rid,
a duplicate id, a streaming session, a closed session.

Then streaming sessions, on a second server with --enable-streaming-session and
--max-cached-tokens 0 (the prefix cache keeps nothing on its own): each turn appends to the
last and still finds its whole KV, which /metrics counts until the session closes or times out;
replace, offset and drop_previous_output are refused in SGLang's words.

Last, --enable-session-radix-cache with --max-cached-tokens 64: after other prompts have pushed
the cache over its cap, a session's next turn still finds its earlier turns (the others were
evicted first); once the session is closed, the same traffic evicts them. Then sessions and a
streaming session on a tiny MoE model under TP2 with DP attention 2. Exit 0 when every check
passes.
"""

import re
import time

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from e2e_support import Checks, Server, call, make_tiny_model, script_args, with_server  # noqa: E402

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


def gauge(server, name):
    _, text = call(server.port, "GET", "/metrics")
    match = re.search(r"^" + re.escape(name) + r"\{[^}]*\} (\S+)$", text, re.M)
    return float(match.group(1)) if match else None


def wait_for_gauge(server, name, value, seconds=5):
    deadline = time.time() + seconds
    while gauge(server, name) != value and time.time() < deadline:
        time.sleep(0.2)
    return gauge(server, name) == value


def flood(server):
    """Prompts of ~40 tokens each, enough to push a 64-token cache over its cap three times."""
    for i in range(3):
        generate(server, {"text": f"Unrelated request number {i}: " + "lorem ipsum dolor sit amet " * 6})


def session_radix_checks(check, server):
    prompt = ids_of(server, "The weather today is")
    status, sid = server.post("/open_session", {"capacity_of_str_len": 1000})
    status, first = generate(server, {"text": "The weather today is", "session_params": {"id": sid}})
    check("a session turn", status == 200, first)
    held = first["meta_info"]["prompt_tokens"] + 4
    flood(server)
    status, second = generate(server, {"text": " and tomorrow", "session_params": {"id": sid,
                                                                                  "rid": first["meta_info"]["id"]}})
    check("the next turn finds the earlier one after other traffic went over the cache cap",
          status == 200 and second["meta_info"]["cached_tokens"] == held, (second.get("meta_info"), held))
    server.post("/close_session", {"session_id": sid})
    time.sleep(1.5)  # the close reaches the scheduler at its next loop
    flood(server)
    status, again = generate(server, {"input_ids": prompt + first["output_ids"] + [11]})
    check("closed, the session's turns are evicted like the rest",
          status == 200 and again["meta_info"]["cached_tokens"] < len(prompt), again.get("meta_info"))


def streaming_checks(check, server):
    status, sid = server.post("/open_session", {"capacity_of_str_len": 1000, "streaming": True})
    check("a streaming session opens", status == 200 and isinstance(sid, str), (status, sid))
    status, first = generate(server, {"text": "The weather today", "session_params": {"id": sid}})
    check("its first turn", status == 200 and len(first.get("output_ids", [])) == 5, first)
    held = first["meta_info"]["prompt_tokens"] + 4  # every token but the last output has KV
    check("/metrics counts the session and the tokens it holds",
          gauge(server, "sglang:num_streaming_sessions") == 1 and
          gauge(server, "sglang:streaming_session_held_tokens") == held,
          (gauge(server, "sglang:num_streaming_sessions"), gauge(server, "sglang:streaming_session_held_tokens")))
    # Without the hold nothing would be cached: this server's prefix cache keeps nothing.
    generate(server, {"text": "Something else entirely, to pass through the cache"})
    prompt1 = ids_of(server, "The weather today")
    status, second = generate(server, {"text": " and tomorrow", "session_params": {"id": sid, "rid": "ignored"}})
    whole = prompt1 + first["output_ids"] + ids_of(server, " and tomorrow")
    status_whole, expected = generate(server, {"input_ids": whole})
    check("the next turn appends to the last (rid ignored) and answers as the whole conversation",
          status == 200 and status_whole == 200 and second.get("output_ids") == expected.get("output_ids") and
          second["meta_info"]["prompt_tokens"] == len(whole), (second, expected))
    check("the next turn's prompt is served from the session's KV",
          second.get("meta_info", {}).get("cached_tokens") == held, (second.get("meta_info"), held))
    for field, value in (("replace", True), ("offset", -1), ("drop_previous_output", True)):
        status, answer = generate(server, {"text": "x", "session_params": {"id": sid, field: value}})
        check(f"{field} is refused in SGLang's words",
              status == 400 and error_text(answer) == f"Streaming sessions do not support {field}.", answer)
    status, _ = server.post("/close_session", {"session_id": sid})
    check("closing the session releases its KV",
          status == 200 and wait_for_gauge(server, "sglang:num_streaming_sessions", 0) and
          gauge(server, "sglang:streaming_session_held_tokens") == 0, gauge(server, "sglang:num_streaming_sessions"))
    status, sid = server.post("/open_session", {"capacity_of_str_len": 100, "streaming": True, "timeout": 3})
    generate(server, {"text": "Hello", "session_params": {"id": sid}})
    check("a streaming session that times out releases its KV while the server idles",
          gauge(server, "sglang:num_streaming_sessions") == 1 and
          wait_for_gauge(server, "sglang:num_streaming_sessions", 0, seconds=8),
          gauge(server, "sglang:num_streaming_sessions"))


def dp_attention_checks(check, server):
    """Behind --enable-dp-attention each attention DP rank keeps its own sessions: the front opens
    a session on one of them and sends its turns there, so a turn continues the last one as on
    one rank, for a session and for a streaming one."""
    for streaming in (False, True):
        kind = "streaming session" if streaming else "session"
        status, sid = server.post("/open_session", {"capacity_of_str_len": 1000, "streaming": streaming})
        status1, first = generate(server, {"text": "The weather today", "session_params": {"id": sid}})
        rid = first["meta_info"]["id"] if status1 == 200 else ""
        status2, second = generate(server, {"text": " and tomorrow", "session_params": {"id": sid, "rid": rid}})
        whole = ids_of(server, "The weather today") + first.get("output_ids", []) + ids_of(server, " and tomorrow")
        status3, expected = generate(server, {"input_ids": whole})
        check(f"DP attention: a {kind}'s second turn answers as the whole conversation",
              status == 200 and status2 == 200 and status3 == 200 and
              second["output_ids"] == expected["output_ids"] and second["meta_info"]["prompt_tokens"] == len(whole),
              (status, first, second, expected))
        check(f"DP attention: the {kind}'s earlier turn is cached on its rank",
              status2 == 200 and second["meta_info"].get("cached_tokens", 0) >= len(whole) - 4, second.get("meta_info"))
        status, _ = server.post("/close_session", {"session_id": sid})
        status_after, _ = generate(server, {"text": "x", "session_params": {"id": sid, "rid": rid}})
        check(f"DP attention: a closed {kind} takes no more turns", status == 200 and status_after == 400, status_after)


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
    for flags, checks in ((["--enable-streaming-session", "--max-cached-tokens", "0"], streaming_checks),
                          (["--enable-session-radix-cache", "--max-cached-tokens", "64"], session_radix_checks)):
        server = Server(tessera, model, flags, os.path.join(workdir, f"serve{flags[0]}.log"))
        try:
            if check(f"server with {flags[0]} ready", server.ready()):
                checks(check, server)
        finally:
            server.close()
    moe = make_tiny_model(tessera, os.path.join(workdir, "moe"), arch="qwen3-moe")
    with_server(check, "--enable-dp-attention", tessera, moe,
                ["--tp", "2", "--dp", "2", "--enable-dp-attention", "--enable-streaming-session"],
                os.path.join(workdir, "serve_dp_attention.log"), lambda server: dp_attention_checks(check, server))
    return check.report()


if __name__ == "__main__":
    sys.exit(main())
