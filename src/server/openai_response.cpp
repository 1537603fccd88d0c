// server/openai_response.cpp — ResponseBuilder (declared in openai_protocol.h): renders
// backend events as OpenAI chat.completion(.chunk) / text_completion bodies and SGLang's
// native /generate body, streaming (SSE) or not (embedding bodies: embedding_protocol.cpp).

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "base/text.h"
#include "server/openai_protocol.h"

namespace tessera::server {
namespace {

using Json = nlohmann::ordered_json;

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

std::string sse(const Json& j) { return "data: " + dump(j) + "\n\n"; }

Json utf8_bytes(const std::string& s) {
    Json bytes = Json::array();
    for (unsigned char c : s) bytes.push_back(static_cast<int>(c));
    return bytes;
}

Json or_null(const std::optional<std::string>& v) { return v ? Json(*v) : Json(nullptr); }

// SGLang's ToolCall (serving_chat.py _process_tool_call_id): "call_" and 24 hex digits, or for
// Kimi-K2 "functions.NAME:N" with N counting the conversation's calls (`earlier` before this
// message's).
Json tool_call_json(ParsedToolCall call, int index, const ToolCallFormat& format, int earlier) {
    std::string id = format.numbered_call_ids ? "functions." + call.name + ":" + std::to_string(earlier + index)
                                              : "call_" + random_hex_id().substr(0, 24);
    return Json{{"id", std::move(id)},
                {"index", index},
                {"type", "function"},
                {"function", Json{{"name", std::move(call.name)}, {"arguments", std::move(call.arguments)}}}};
}

// chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}
Json chat_logprobs(const std::vector<TokenLogprob>& lps) {
    Json content = Json::array();
    for (const TokenLogprob& lp : lps) {
        Json top = Json::array();
        for (const auto& [text, logprob] : lp.top) {
            top.push_back(Json{{"token", text}, {"logprob", logprob}, {"bytes", utf8_bytes(text)}});
        }
        content.push_back(Json{{"token", lp.text},
                               {"logprob", lp.logprob},
                               {"bytes", utf8_bytes(lp.text)},
                               {"top_logprobs", std::move(top)}});
    }
    return Json{{"content", std::move(content)}};
}

// A log-probability, or null where there is none (the first of a prompt's).
Json logprob_or_null(float v) { return std::isnan(v) ? Json(nullptr) : Json(v); }

// completions: {"tokens", "token_logprobs", "top_logprobs": [{text: lp}], "text_offset"}; with
// echo the prompt's entries first, its first one null (SGLang's to_openai_style_logprobs).
// `offset` is the text offset of the first token and is advanced past the last one.
Json completion_logprobs(const std::vector<TokenLogprob>* prompt, const std::vector<TokenLogprob>& lps,
                         std::size_t& offset) {
    Json tokens = Json::array(), token_lps = Json::array(), tops = Json::array(),
         offsets = Json::array();
    const auto add = [&](const TokenLogprob& lp, bool first_of_prompt) {
        tokens.push_back(lp.text);
        token_lps.push_back(logprob_or_null(lp.logprob));
        Json top = Json::object();
        for (const auto& [text, logprob] : lp.top) top[text] = logprob;
        tops.push_back(first_of_prompt ? Json(nullptr) : std::move(top));
        offsets.push_back(offset);
        offset += lp.text.size();
    };
    if (prompt != nullptr)
        for (std::size_t i = 0; i < prompt->size(); ++i) add((*prompt)[i], i == 0);
    for (const TokenLogprob& lp : lps) add(lp, false);
    return Json{{"tokens", std::move(tokens)},
                {"token_logprobs", std::move(token_lps)},
                {"top_logprobs", std::move(tops)},
                {"text_offset", std::move(offsets)}};
}

// meta_info's lists of log-probabilities (SGLang's tokenizer_manager.py
// detokenize_logprob_tokens / detokenize_top_logprobs_tokens): [logprob, token_id, text or
// null] per token, and per token the list of its best ones and of the token_ids_logprob ones
// alike; a prompt's first entry has a null log-probability and null lists.
struct NativeLogprobs {
    Json tokens = Json::array();
    Json tops = Json::array();
    Json chosen = Json::array();
};
Json token_values(const std::vector<std::pair<std::string, float>>& values, const std::vector<std::int32_t>& ids,
                  bool with_text) {
    Json out = Json::array();
    for (std::size_t k = 0; k < values.size(); ++k) {
        const Json id = k < ids.size() ? Json(ids[k]) : Json(nullptr);
        out.push_back(Json::array({logprob_or_null(values[k].second), id,
                                   with_text ? Json(values[k].first) : Json(nullptr)}));
    }
    return out;
}
NativeLogprobs native_logprobs(const std::vector<TokenLogprob>& lps, bool with_text, bool prompt) {
    NativeLogprobs out;
    for (std::size_t i = 0; i < lps.size(); ++i) {
        const TokenLogprob& lp = lps[i];
        const Json text = with_text ? Json(lp.text) : Json(nullptr);
        out.tokens.push_back(Json::array({logprob_or_null(lp.logprob), lp.token, text}));
        const bool none = prompt && i == 0;
        out.tops.push_back(none ? Json(nullptr) : token_values(lp.top, lp.top_ids, with_text));
        out.chosen.push_back(none ? Json(nullptr) : token_values(lp.chosen, lp.chosen_ids, with_text));
    }
    return out;
}

// meta_info's log-probability fields (tokenizer_manager.py add_logprob_to_meta_info): the
// prompt's (from logprob_start_len; [] when none came) and the output's, with their best ones
// when top_logprobs_num asked for some, and the token_ids_logprob ones when it gave ids.
// `output_length`: how many output tokens have one so far (`output` may be only the new ones).
// `unsampled`: a request of max_new_tokens 0 answers the distribution at the prompt's end as
// one row of the best ones and of the token_ids_logprob ones, and no output token
// (scheduler_components/output_streamer.py slices [0:1] of lists the sampler never filled).
struct NativeLogprobFields {
    bool with_text = false;
    bool with_top = false;
    bool with_chosen = false;
};
void add_native_logprobs(Json& meta, const std::vector<TokenLogprob>* prompt, const std::vector<TokenLogprob>& output,
                         std::size_t output_length, NativeLogprobFields fields,
                         const std::optional<TokenLogprob>& unsampled) {
    NativeLogprobs in = native_logprobs(prompt ? *prompt : std::vector<TokenLogprob>{}, fields.with_text, true);
    NativeLogprobs out = native_logprobs(output, fields.with_text, false);
    if (output.empty() && unsampled) {
        out.tops.push_back(token_values(unsampled->top, unsampled->top_ids, fields.with_text));
        out.chosen.push_back(token_values(unsampled->chosen, unsampled->chosen_ids, fields.with_text));
    }
    meta["input_token_logprobs"] = std::move(in.tokens);
    meta["output_token_logprobs_length"] = output_length;
    meta["output_token_logprobs"] = std::move(out.tokens);
    if (fields.with_top) {
        meta["input_top_logprobs"] = std::move(in.tops);
        meta["output_top_logprobs"] = std::move(out.tops);
    }
    if (fields.with_chosen) {
        meta["input_token_ids_logprobs"] = std::move(in.chosen);
        meta["output_token_ids_logprobs"] = std::move(out.chosen);
    }
}

Json native_finish_reason(const std::optional<std::string>& reason,
                          const std::optional<std::string>& matched, std::int64_t length) {
    if (!reason) return nullptr;
    Json j = Json::object();
    j["type"] = *reason;
    if (*reason == "stop") j["matched"] = or_null(matched);
    if (*reason == "length") j["length"] = length;
    return j;
}

// meta_info.hidden_states: the prompt's entry as rows, every other entry one vector.
Json hidden_states_json(const std::vector<HiddenStates>& entries) {
    Json out = Json::array();
    for (const HiddenStates& h : entries) {
        if (!h.prompt) {
            out.push_back(h.values);
            continue;
        }
        const auto cols = static_cast<std::ptrdiff_t>(h.values.size()) / std::max<std::int64_t>(h.rows, 1);
        Json rows = Json::array();
        for (auto it = h.values.begin(); it != h.values.end(); it += cols)
            rows.push_back(std::vector<float>(it, it + cols));
        out.push_back(std::move(rows));
    }
    return out;
}

// meta_info.routed_experts and sglext.routed_experts: the int32 ids' little-endian bytes in base64
// (SGLang's detokenizer encodes them so).
std::string routed_experts_base64(const std::vector<std::int32_t>& ids) {
    return base64_encode({reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(std::int32_t)});
}

// An OpenAI choice's hidden_states (SGLang's entrypoints/openai/utils.py
// process_hidden_states_from_ret): with true, the state that predicted the last output token
// ([] when only one token was generated, whose state is the prompt's); with "last", the list.
Json openai_hidden_states(const std::vector<HiddenStates>& entries, HiddenStatesMode mode) {
    if (mode == HiddenStatesMode::kLast) return hidden_states_json(entries);
    if (entries.size() > 1) return entries.back().values;
    return Json::array();
}

}  // namespace

ResponseBuilder::ResponseBuilder(const ParsedRequest& request)
    : kind_(request.kind),
      id_(request.id),
      model_(request.model),
      created_(request.created),
      stream_(request.stream),
      include_usage_(request.include_usage),
      text_in_logprobs_(request.return_text_in_logprobs),
      echo_(request.echo),
      hidden_states_(request.requests.empty() ? HiddenStatesMode::kNone
                                              : request.requests[0].params.return_hidden_states),
      token_ids_only_(request.token_ids_only),
      incremental_(request.incremental),
      dimensions_(request.dimensions),
      base64_(request.base64),
      batched_input_(request.batched_input),
      apply_softmax_(request.apply_softmax),
      reasoning_(request.reasoning),
      force_reasoning_(request.force_reasoning),
      tool_calls_(request.tool_calls),
      tool_names_(request.tool_names),
      earlier_tool_calls_(request.earlier_tool_calls),
      start_(std::chrono::steady_clock::now()),
      choices_(request.requests.size()) {
    for (std::size_t i = 0; i < choices_.size(); ++i) {
        const GenerationParams& p = request.requests[i].params;
        choices_[i].wants_logprobs = p.logprobs;
        choices_[i].top_logprobs = p.top_logprobs;
        choices_[i].wants_token_ids_logprobs = !p.token_ids_logprob.empty();
    }
    for (const GenerationRequest& r : request.requests) request_ids_.push_back(r.request_id);
    if (reasoning_ && stream_) {
        for (Choice& c : choices_) c.reasoning.emplace(*reasoning_, force_reasoning_, request.stream_reasoning);
    }
    if (tool_calls_ && !tool_names_.empty() && stream_) {
        for (Choice& c : choices_) c.tools.emplace(*tool_calls_, tool_names_);
    }
}

std::string ResponseBuilder::add_event(std::size_t index, const GenerationEvent& event) {
    if (index >= choices_.size() || choices_[index].finished) return {};
    Choice& c = choices_[index];
    const bool final = event.finish_reason.has_value() || event.error.has_value();
    // Before the chunk: /generate's chunks carry every entry so far.
    if (!event.hidden_states.empty() && hidden_states_ == HiddenStatesMode::kLast) {
        c.hidden_states = {event.hidden_states.back()};  // SGLang keeps only the latest
    } else {
        c.hidden_states.insert(c.hidden_states.end(), event.hidden_states.begin(), event.hidden_states.end());
    }
    if (event.routed_experts) c.routed_experts = event.routed_experts;
    if (event.input_logprobs) c.input_logprobs = event.input_logprobs;
    if (event.unsampled_logprobs) c.unsampled_logprobs = event.unsampled_logprobs;
    std::string out;
    if (stream_) out = stream_chunk(index, event);
    if (echo_ && event.prompt_text) c.text += *event.prompt_text;
    c.text += event.text;
    c.output_ids.insert(c.output_ids.end(), event.token_ids.begin(), event.token_ids.end());
    // Kept while streaming too: a streamed /generate chunk repeats the output's so far.
    if (!stream_ || kind_ == ApiKind::kGenerate)
        c.logprobs.insert(c.logprobs.end(), event.logprobs.begin(), event.logprobs.end());
    c.usage = event.usage;
    if (!event.embedding.empty()) c.embedding = event.embedding;
    if (event.error && !error_) error_ = ApiError::from_status(*event.error);
    if (final) {
        c.finish_reason = event.finish_reason ? event.finish_reason : std::optional<std::string>("abort");
        c.matched_stop = event.matched_stop;
        c.finished = true;
        c.finished_at = std::chrono::steady_clock::now();
        ++n_finished_;
        if (stream_ && finished()) out += stream_end();
    }
    return out;
}

std::string ResponseBuilder::stream_chunk(std::size_t index, const GenerationEvent& event) {
    Choice& c = choices_[index];
    const bool final = event.finish_reason.has_value();
    if (event.error) return "data: " + ApiError::from_status(*event.error).to_json() + "\n\n";

    if (kind_ == ApiKind::kGenerate) {
        // SGLang's default: cumulative text and output_ids in every chunk; with
        // --incremental-streaming-output only what this event adds (tokenizer_manager.py
        // _handle_batch_output).
        Json meta = Json::object();
        meta["id"] = request_ids_[index];
        meta["finish_reason"] = native_finish_reason(event.finish_reason, event.matched_stop,
                                                     event.usage.completion_tokens);
        meta["prompt_tokens"] = event.usage.prompt_tokens;
        meta["completion_tokens"] = event.usage.completion_tokens;
        meta["cached_tokens"] = event.usage.cached_tokens;
        meta["reasoning_tokens"] = event.usage.reasoning_tokens;
        meta["e2e_latency"] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
        if (c.wants_logprobs) {
            // tokenizer_manager.py add_logprob_to_meta_info: every chunk carries the prompt's and
            // the output's so far; --incremental-streaming-output slices the output's to what is
            // new (_slice_streaming_output_meta_info).
            std::vector<TokenLogprob> output = incremental_ ? std::vector<TokenLogprob>{} : c.logprobs;
            output.insert(output.end(), event.logprobs.begin(), event.logprobs.end());
            add_native_logprobs(meta, c.input_logprobs ? &*c.input_logprobs : nullptr, output,
                                c.logprobs.size() + event.logprobs.size(),
                                {text_in_logprobs_, c.top_logprobs > 0, c.wants_token_ids_logprobs},
                                c.unsampled_logprobs);
        }
        if (hidden_states_ != HiddenStatesMode::kNone) meta["hidden_states"] = hidden_states_json(c.hidden_states);
        if (event.routed_experts) meta["routed_experts"] = routed_experts_base64(*event.routed_experts);
        Json chunk = Json::object();
        if (choices_.size() > 1 || batched_input_) chunk["index"] = index;
        if (!token_ids_only_) chunk["text"] = incremental_ ? event.text : c.text + event.text;
        Json ids = incremental_ ? Json::array() : Json(c.output_ids);
        for (std::int32_t t : event.token_ids) ids.push_back(t);
        chunk["output_ids"] = std::move(ids);
        chunk["meta_info"] = std::move(meta);
        return sse(chunk);
    }

    const bool chat = kind_ == ApiKind::kChatCompletion;
    std::string out;
    Json base = Json::object();
    base["id"] = id_;
    base["object"] = chat ? "chat.completion.chunk" : "text_completion";
    base["created"] = created_;
    base["model"] = model_;
    if (chat && !c.sent_role) {
        c.sent_role = true;
        Json chunk = base;
        chunk["choices"] = Json::array({Json{{"index", index},
                                             {"delta", Json{{"role", "assistant"}, {"content", ""}}},
                                             {"logprobs", nullptr},
                                             {"finish_reason", nullptr}}});
        if (include_usage_) chunk["usage"] = nullptr;
        out += sse(chunk);
    }
    // The reasoning part of this piece goes out first, in a chunk of its own
    // (serving_chat.py _process_reasoning_stream).
    const auto send_delta = [&](Json delta) {
        Json chunk = base;
        chunk["choices"] = Json::array(
            {Json{{"index", index}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", nullptr}}});
        if (include_usage_) chunk["usage"] = nullptr;
        out += sse(chunk);
    };
    std::string content = event.text;
    if (chat && c.reasoning) {
        ReasoningParts parts = c.reasoning->parse_increment(event.text);
        if (final) {
            ReasoningParts held = c.reasoning->finish();
            parts.reasoning += held.reasoning;
            parts.normal += held.normal;
        }
        if (!parts.reasoning.empty()) send_delta(Json{{"reasoning_content", parts.reasoning}});
        content = std::move(parts.normal);
    }
    // Tool calls after the reasoning, from what is left, after the content that came before
    // them: a call opens with its id and name, and its arguments follow as they settle
    // (serving_chat.py _process_tool_call_stream); OpenAI's later deltas carry only the index
    // and the arguments' next piece.
    if (chat && c.tools) {
        ToolCallParts parts = c.tools->parse_increment(content);
        if (final) parts.normal += c.tools->finish();
        content = std::move(parts.normal);
        if (!parts.deltas.empty() && !content.empty()) send_delta(Json{{"content", std::exchange(content, {})}});
        for (ToolCallDelta& d : parts.deltas) {
            Json call_json = d.name.empty()
                                 ? Json{{"index", d.index}, {"function", Json{{"arguments", std::move(d.arguments)}}}}
                                 : tool_call_json({std::move(d.name), std::move(d.arguments)}, d.index, *tool_calls_,
                                                  earlier_tool_calls_);
            c.n_tool_calls = std::max(c.n_tool_calls, d.index + 1);
            send_delta(Json{{"tool_calls", Json::array({std::move(call_json)})}});
        }
    }
    const bool echoes = !chat && echo_ && event.prompt_text;
    if (content.empty() && event.logprobs.empty() && !final && !echoes) return out;

    Json choice = Json::object();
    choice["index"] = index;
    if (chat) {
        choice["delta"] = content.empty() ? Json::object() : Json{{"content", content}};
        choice["logprobs"] =
            c.wants_logprobs && !event.logprobs.empty() ? chat_logprobs(event.logprobs) : Json(nullptr);
    } else {
        choice["text"] = echoes ? *event.prompt_text + event.text : event.text;
        const std::vector<TokenLogprob>* prompt = echo_ && event.input_logprobs ? &*event.input_logprobs : nullptr;
        choice["logprobs"] = c.wants_logprobs && (!event.logprobs.empty() || prompt != nullptr)
                                 ? completion_logprobs(prompt, event.logprobs, c.text_offset)
                                 : Json(nullptr);
    }
    // serving_chat.py: a stop after tool calls finishes as "tool_calls".
    const bool tool_stop = final && c.n_tool_calls > 0 && *event.finish_reason == "stop";
    choice["finish_reason"] = !final ? Json(nullptr)
                              : tool_stop ? Json("tool_calls")
                                          : Json(openai_finish_reason(*event.finish_reason));
    choice["matched_stop"] = final && !tool_stop ? or_null(event.matched_stop) : Json(nullptr);
    Json chunk = base;
    chunk["choices"] = Json::array({std::move(choice)});
    if (include_usage_) chunk["usage"] = nullptr;
    out += sse(chunk);
    if (final && hidden_states_ != HiddenStatesMode::kNone) {
        // serving_chat.py / serving_completions.py: the hidden states follow the finishing chunk.
        Json states = openai_hidden_states(c.hidden_states, hidden_states_);
        Json last = chat ? Json{{"index", index}, {"delta", Json{{"hidden_states", std::move(states)}}}}
                         : Json{{"index", index}, {"text", ""}, {"hidden_states", std::move(states)}};
        last["logprobs"] = nullptr;
        last["finish_reason"] = nullptr;
        chunk = base;
        chunk["choices"] = Json::array({std::move(last)});
        if (include_usage_) chunk["usage"] = nullptr;
        out += sse(chunk);
    }
    if (final && index == 0 && event.routed_experts) {
        // serving_chat.py: the first choice's routing, in a chunk of its own.
        chunk = std::move(base);
        chunk["choices"] = Json::array();
        chunk["sglext"] = Json{{"routed_experts", routed_experts_base64(*event.routed_experts)}};
        out += sse(chunk);
    }
    return out;
}

std::string ResponseBuilder::usage_json_dump() const {
    Usage total;
    if (!choices_.empty()) {
        total.prompt_tokens = choices_[0].usage.prompt_tokens;  // one prompt for all n choices
        total.cached_tokens = choices_[0].usage.cached_tokens;
    }
    for (const Choice& c : choices_) {
        total.completion_tokens += c.usage.completion_tokens;
        total.reasoning_tokens += c.usage.reasoning_tokens;
    }
    Json usage = Json::object();
    usage["prompt_tokens"] = total.prompt_tokens;
    usage["total_tokens"] = total.prompt_tokens + total.completion_tokens;
    usage["completion_tokens"] = total.completion_tokens;
    usage["prompt_tokens_details"] = Json{{"cached_tokens", total.cached_tokens}};
    usage["reasoning_tokens"] = total.reasoning_tokens;  // SGLang's UsageInfo: at the top level
    return dump(usage);
}

std::string ResponseBuilder::stream_end() const {
    std::string out;
    if (include_usage_ && kind_ != ApiKind::kGenerate) {
        Json chunk = Json::object();
        chunk["id"] = id_;
        chunk["object"] = kind_ == ApiKind::kChatCompletion ? "chat.completion.chunk" : "text_completion";
        chunk["created"] = created_;
        chunk["model"] = model_;
        chunk["choices"] = Json::array();
        chunk["usage"] = Json::parse(usage_json_dump());
        out += sse(chunk);
    }
    out += "data: [DONE]\n\n";
    return out;
}

std::string ResponseBuilder::body() const {
    if (kind_ == ApiKind::kEmbedding || kind_ == ApiKind::kEncode) return embedding_body();
    if (kind_ == ApiKind::kScore) return score_body();
    if (kind_ == ApiKind::kGenerate) {
        Json items = Json::array();
        for (std::size_t i = 0; i < choices_.size(); ++i) {
            const Choice& c = choices_[i];
            Json meta = Json::object();
            meta["id"] = request_ids_[i];
            meta["finish_reason"] =
                native_finish_reason(c.finish_reason, c.matched_stop, c.usage.completion_tokens);
            meta["prompt_tokens"] = c.usage.prompt_tokens;
            meta["completion_tokens"] = c.usage.completion_tokens;
            meta["cached_tokens"] = c.usage.cached_tokens;
            meta["reasoning_tokens"] = c.usage.reasoning_tokens;
            meta["e2e_latency"] = std::chrono::duration<double>(c.finished_at - start_).count();
            if (c.wants_logprobs)
                add_native_logprobs(meta, c.input_logprobs ? &*c.input_logprobs : nullptr, c.logprobs,
                                    c.logprobs.size(),
                                    {text_in_logprobs_, c.top_logprobs > 0, c.wants_token_ids_logprobs},
                                    c.unsampled_logprobs);
            if (hidden_states_ != HiddenStatesMode::kNone) meta["hidden_states"] = hidden_states_json(c.hidden_states);
            if (c.routed_experts) meta["routed_experts"] = routed_experts_base64(*c.routed_experts);
            Json item = Json::object();
            if (!token_ids_only_) item["text"] = c.text;
            item["output_ids"] = c.output_ids;
            item["meta_info"] = std::move(meta);
            items.push_back(std::move(item));
        }
        // A batch answers a list, even of one (SGLang's is_single).
        return dump(items.size() == 1 && !batched_input_ ? items[0] : items);
    }

    const bool chat = kind_ == ApiKind::kChatCompletion;
    Json root = Json::object();
    root["id"] = id_;
    root["object"] = chat ? "chat.completion" : "text_completion";
    root["created"] = created_;
    root["model"] = model_;
    Json choices = Json::array();
    for (std::size_t i = 0; i < choices_.size(); ++i) {
        const Choice& c = choices_[i];
        Json choice = Json::object();
        choice["index"] = i;
        std::optional<std::string> finish_reason = c.finish_reason;
        Json matched_stop = or_null(c.matched_stop);
        if (chat) {
            ReasoningParts parts{"", c.text};
            if (reasoning_) parts = ReasoningDetector(*reasoning_, force_reasoning_, true).parse_all(c.text);
            Json content = std::move(parts.normal);
            Json tool_calls = nullptr;
            if (tool_calls_ && !tool_names_.empty()) {
                ToolCallParts found = ToolCallDetector(*tool_calls_, tool_names_).parse_all(content.get<std::string>());
                if (!found.calls.empty()) {
                    content = found.normal.empty() ? Json(nullptr) : Json(std::move(found.normal));
                    tool_calls = Json::array();
                    for (ParsedToolCall& call : found.calls) {
                        const auto index = static_cast<int>(tool_calls.size());
                        tool_calls.push_back(tool_call_json(std::move(call), index, *tool_calls_, earlier_tool_calls_));
                    }
                    if (finish_reason == "stop") {
                        finish_reason = "tool_calls";
                        matched_stop = nullptr;
                    }
                }
            }
            choice["message"] = Json{{"role", "assistant"},
                                     {"content", std::move(content)},
                                     {"reasoning_content", parts.reasoning.empty() ? Json(nullptr)
                                                                                   : Json(std::move(parts.reasoning))},
                                     {"tool_calls", std::move(tool_calls)}};
            choice["logprobs"] = c.wants_logprobs ? chat_logprobs(c.logprobs) : Json(nullptr);
        } else {
            choice["text"] = c.text;
            std::size_t offset = 0;
            const std::vector<TokenLogprob>* prompt = echo_ && c.input_logprobs ? &*c.input_logprobs : nullptr;
            choice["logprobs"] = c.wants_logprobs ? completion_logprobs(prompt, c.logprobs, offset) : Json(nullptr);
        }
        choice["finish_reason"] = finish_reason ? Json(openai_finish_reason(*finish_reason)) : Json(nullptr);
        choice["matched_stop"] = std::move(matched_stop);
        if (hidden_states_ != HiddenStatesMode::kNone)
            choice["hidden_states"] = openai_hidden_states(c.hidden_states, hidden_states_);
        choices.push_back(std::move(choice));
    }
    root["choices"] = std::move(choices);
    root["usage"] = Json::parse(usage_json_dump());
    // SGLang's process_routed_experts_from_ret: the first choice's, beside the choices.
    if (!choices_.empty() && choices_[0].routed_experts)
        root["sglext"] = Json{{"routed_experts", routed_experts_base64(*choices_[0].routed_experts)}};
    return dump(root);
}

}  // namespace tessera::server
