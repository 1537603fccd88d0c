#!/usr/bin/env node
// Generates the golden files qwen3.json, llama3.json, deepseek_v3.json, mistral.json and gpt2_style.json that
// src/tokenizer/tokenizer_test.cpp checks tessera's tokenizer against. The reference is
// Hugging Face `tokenizers` (the Rust library behind transformers' fast tokenizers) through
// its Node binding, loading the SAME tokenizer.json files as the C++ test, so the expected
// ids do not come from tessera (except the BOS that transformers adds for DeepSeek V3: see
// transformersSpecialIds).
//
// Usage (from this folder):  npm ci && node generate.js [path/to/assets/tokenizers]
// Default assets folder: ../../../../shared/assets/tokenizers (shared/ beside the repository).

'use strict';

const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('tokenizers');

const assets = process.argv[2] ||
    path.resolve(__dirname, '..', '..', '..', '..', 'shared', 'assets', 'tokenizers');

// Each case is either {text} or {hex}: hex is an exact byte string (possibly invalid UTF-8).
// A JS string cannot hold invalid UTF-8, so hex cases are decoded the way any JS/Python
// caller's string would be: WHATWG TextDecoder, which replaces each maximal invalid subpart
// with U+FFFD. tessera applies the same replacement to its byte input.
const CASES = [
    // --- empty, single characters, whitespace
    { text: '' },
    { text: 'a' },
    { text: ' ' },
    { text: '\t' },
    { text: '\n' },
    { text: ' leading space' },
    { text: 'trailing space ' },
    { text: '  two leading spaces and two trailing  ' },
    { text: 'multiple     spaces    between words' },
    { text: ' '.repeat(40) },
    { text: 'line one\nline two\n\nline four\n' },
    { text: 'windows\r\nline endings\r\n\r\n' },
    { text: '\n'.repeat(10) },
    { text: '   \n   \n  x' },
    { text: 'end of line   \n  next' },
    { text: '\r\r\n\n\r' },
    { text: 'tabs\tand\t\tmore\ttabs' },
    { text: '    indented with four spaces\n        and eight' },
    { text: 'nbsp\u00a0here, ideographic\u3000space, em\u2003space, line\u2028sep' },
    { text: 'Zero\u200bwidth\u200cjoiner\u200d test \ufeffbom' },
    { text: 'a\u001cb\u0085c\u000bd\u000ce\u00a0\u00a0f \u3000\u4e2d\u6587' },
    { text: '\t\n \r\n\n \t x\n ' },
    // --- English
    { text: 'Hello, world!' },
    { text: 'The quick brown fox jumps over the lazy dog.' },
    { text: "I'm sure it's what they'd've wanted, isn't it? WE'LL SEE. " +
            "You're right, I've got it." },
    { text: "'s 'S 'tis 'Re 'LL 'd 'm 've it'ſ" },
    { text: "don't DON'T Don't can't won't shouldn't" },
    { text: "'hello' \"quoted\" \u2018curly\u2019 \u201cdouble\u201d" },
    { text: 'Supercalifragilisticexpialidocious antidisestablishmentarianism ' +
            'pneumonoultramicroscopicsilicovolcanoconiosis' },
    { text: 'camelCaseIdentifier snake_case_identifier SCREAMING_CASE kebab-case' },
    { text: 'email: someone@example.org, phone: +1 (555) 123-4567' },
    { text: 'the the the the the the the the' },
    { text: 'a'.repeat(57) },
    { text: '!!!??? ... --- *** ### @@@' },
    { text: '...!?\n\n' },
    { text: "''s ' s x'LL y'Ll z'lL q'' rock'n'roll" },
    { text: '(hello) [world] {again} -dash _under .dot' },
    // --- numbers
    { text: 'Numbers: 0 7 42 123 1234 12345 123456789 3.14159 -273.15 1e10 0x1F' },
    { text: '2024-01-15T10:30:00Z' },
    { text: '1,000,000 dollars and 99.99%' },
    { text: '12345678901234567890' },
    { text: '\u0660\u0661\u0662\u0663 \u0e51\u0e52\u0e53 \u216b \u00bd \u00be \u00b2' },
    { text: 'abc123def 1 234 5678 v2.0.1 x86_64 ２０２４年 第3章' },
    // --- other scripts
    { text: '你好，世界！今天天气很好。' },
    { text: '我们在北京大学学习自然语言处理。' },
    { text: '日本語のテキスト：東京は日本の首都です。カタカナとひらがな。' },
    { text: '한국어 텍스트도 있습니다.' },
    { text: 'Русский текст: Привет, мир!' },
    { text: 'Ελληνικά και العربية و עברית' },
    { text: 'हिन्दी पाठ और தமிழ்' },
    { text: 'Mixed 中文 and English 混合 text 123 测试' },
    { text: '\ue000\uf8ff \u{1d518}\u{1d52b}\u{1d526}\u{1d520}\u{1d52c}\u{1d521}\u{1d522} ' +
            '\u{1d7d9}\u{1d7da}\u{1d7db}' },
    // --- combining characters (the Qwen NFC normalizer composes them; Llama has none)
    { text: 'e\u0301 cafe\u0301 Cafe\u0301' },
    { text: 'A\u030a \u00e5ngstr\u00f6m \u212b' },
    { text: '\u1100\u1161\u11a8 \uac01' },
    { text: '\ufb01 ligature and \uff12\uff10\uff12\uff14 fullwidth' },
    // --- code
    { text: 'def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n' },
    { text: 'int main() {\n\tstd::vector<int> v{1, 2, 3};\n\tfor (auto& x : v) {\n\t\tx *= 2;\n' +
            '\t}\n\treturn 0;\n}\n' },
    { text: '{"key": "value", "list": [1, 2, 3], "nested": {"a": null}}' },
    { text: '<div class="box"><p>Hello &amp; welcome</p></div>' },
    { text: 'https://example.com/path?query=1&other=two#frag' },
    { text: '$ ls -la | grep "*.txt" > out.log 2>&1' },
    { text: '# Title\n\n- item 1\n- item 2\n\n```python\nprint(\'hi\')\n```\n' },
    { text: '$$\\int_0^1 x^2\\,dx = \\frac{1}{3}$$' },
    // --- emoji
    { text: '😀😃😄😁 🎉🎊' },
    { text: '👨‍👩‍👧‍👦 family, 👩🏽‍💻 coder, 🏳️‍🌈 flag' },
    { text: '🇺🇸🇬🇧🇯🇵🇨🇳🇩🇪' },
    { text: '👍🏻👍🏼👍🏽👍🏾👍🏿' },
    { text: '∀x∈ℝ: x² ≥ 0, ∑ᵢ aᵢ → ∞ ≠ ½' },
    // --- special and added tokens embedded in text (both families' tokens: each tokenizer
    // matches its own and treats the other's as plain text)
    { text: '<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n' },
    { text: '<think>\nLet me think.\n</think>\n\nAnswer: 42' },
    { text: 'text<|endoftext|>more text' },
    { text: '<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>' },
    { text: '<|eot_id|><|eot_id|>' },
    { text: ' <|im_end|> ' },
    { text: '<|im_start <|eot_id <think <|begin_of_text| <|endoftext|' },
    { text: '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' },
    { text: 'a<|end_of_text|>b<|reserved_special_token_5|>c<|fim_prefix|>d' },
    // --- a longer mixed paragraph
    { text: ('Streaming inference servers batch requests continuously. 流式推理服务器连续批处理请求。' +
             ' Tokens/s: 1234.5 🚀\n\tif (x) { y(); }\n').repeat(6) },
    // --- invalid UTF-8 (bytes as hex)
    { hex: '48656c6c6fff776f726c64' },          // Hello<FF>world
    { hex: 'c3' },                              // truncated 2-byte sequence at end
    { hex: 'e28261' },                          // truncated 3-byte sequence then 'a'
    { hex: 'eda080' },                          // encoded surrogate U+D800
    { hex: 'f4908080' },                        // above U+10FFFF
    { hex: 'c0af' },                            // overlong '/'
    { hex: '8080' },                            // stray continuation bytes
    { hex: 'f09f9820206f6b' },                  // truncated emoji, spaces, "ok"
    { hex: 'feff' },                            // bytes never valid in UTF-8
    { hex: 'e4bde5a5bd' },                      // broken 你 followed by 好
    // --- DeepSeek V3's three Split steps: digit groups, then CJK/kana runs, then a word
    // pattern with \p{P} \p{S} \p{M} classes. Each later step splits the pieces of the
    // earlier ones, so these mix the classes at the piece boundaries.
    { text: '1 12 123 1234 12345 123456 1234567' },
    { text: 'a1b12c123d1234e12345f123456g1234567h' },
    { text: '1234567.89 -0.5 +42 3rd 21st 100th v1.2.3-beta 0.5mg' },
    { text: '\u0663\u0664\u0665\u0666\u0667 \uff11\uff12\uff13\uff14 ' +
            '\u2460\u2461\u2462\u2463 \u216b\u00bdx' },
    { text: 'Hello世界123ひらがなabcカタカナ漢字and English混合テキスト' },
    { text: ' 中文 日本語 ' },
    { text: 'abc中def 12中34 中1 1中' },
    { text: 'テスト・テスト ラーメン ゝゞ \u309b\u309c \u30a0 \u3099\u309a' },
    { text: '\u3400\u9fa5\u9fa6\u9fff\u{20000} \u3041\u309f\u30ff\u3040' },
    { text: '中文，标点。「日本」『引用』【括弧】' },
    { text: '.Hello (abc #define MAX 10\n#include <stdio.h>' },
    { text: '..Hello .\u00e9 .Hello\u00e9 @user $var __init__ a.b.c' },
    { text: '-flag --long-flag x=y+z a+b [A-Z] {a} <tag> /path/to ~home \\back' },
    { text: "'quoted' \"Hi\" it's `code` 'S 'LL" },
    { text: '...\n\n!!\r\n !?\n\t! end.\n  .Hello\n.Hello \t.x' },
    { text: 'e\u0301 \u0301abc a\u0301\u0302b \u0301 1\u0301 \u0301' },
    { text: '\u0905\u0928\u0941\u091a\u094d\u091b\u0947\u0926 \u0e01\u0e48\u0e2d\u0e19 ' +
            '\u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd' },
    { text: 'a\u20dd 1\u20e3 #\ufe0f\u20e3 x\u200dy \ufe0f \u200bword word\u200b' },
    { text: '\u2211 \u20ac \u00a9 \u00ae \u2122 \u00b0 \u00b1 \u00d7 \u00f7 \u221a \u221e' },
    { text: '\u20ac100 100\u20ac \u00a92024 Company $5 \u00a310 \u00a520 ^_^ ' +
            '\u2192\u2190\u2191\u2193 \u00b11.5' },
    { text: 'Hi \u{1f44b} there \u{1f468}\u200d\u{1f4bb}code \u{1f1ef}\u{1f1f5}Japan ' +
            'a\u{1f600}b \u2764\ufe0f' },
    { text: 'a\u3000b \u00a0hello \u2028line\u2029para \u0000\u0001abc\u007f \u0085x' },
    { text: '\ue000abc \u{f0000} \u0378x \u00adsoft\u00ad' },
    { text: '<\uff5cUser\uff5c>Hello<\uff5cAssistant\uff5c>Hi' +
            '<\uff5cend\u2581of\u2581sentence\uff5c>' },
    { text: '<\uff5cbegin\u2581of\u2581sentence\uff5c>text<|EOT|>' },
    { text: '<\uff5ctool\u2581calls\u2581begin\uff5c>' +
            '<\uff5ctool\u2581call\u2581begin\uff5c>function' +
            '<\uff5ctool\u2581sep\uff5c>get_weather\n```json\n{"city": "\u5317\u4eac"}\n```' +
            '<\uff5ctool\u2581call\u2581end\uff5c><\uff5ctool\u2581calls\u2581end\uff5c>' },
    { text: '<\uff5cfim\u2581begin\uff5c>def f(x):<\uff5cfim\u2581hole\uff5c>\n' +
            '    return y<\uff5cfim\u2581end\uff5c>' },
    { text: ('DeepSeek-V3\u306f\u5f37\u529b\u306aMoE\u30e2\u30c7\u30eb\u3067\u3059\u3002' +
             ' It has 671B parameters (37B active); \u4e0a\u4e0b\u6587\u957f\u5ea6128K\u3002\n' +
             '    #define N 1024\n\tx->y = a[i] * 3.14159;  // \u8ba1\u7b97\n').repeat(3) },
];

function caseText(c) {
    if (c.hex !== undefined) return new TextDecoder('utf-8').decode(Buffer.from(c.hex, 'hex'));
    return c.text;
}

async function encodeIds(tok, text, addSpecial) {
    const enc = await tok.encode(text, null, { addSpecialTokens: addSpecial });
    return Array.from(enc.getIds());
}

// Id sequences that are not the encoding of any text: reversed, gapped, special tokens
// wedged into multi-byte characters, out-of-range ids. They exercise lossy UTF-8 decoding.
async function makeDecodeCases(tok, specialId) {
    const outOfRange = tok.getVocabSize(true) + 1000;
    const sources = ['😀😃 🎉', '你好，世界！', '👨‍👩‍👧‍👦', '日本語 テキスト', 'e\u0301 🇯🇵'];
    const cases = [];
    for (const s of sources) {
        const ids = await encodeIds(tok, s, false);
        cases.push(ids.slice().reverse());
        cases.push(ids.filter((_, i) => i % 2 === 0));
        const mid = Math.max(1, ids.length >> 1);
        cases.push([...ids.slice(0, mid), specialId, ...ids.slice(mid)]);
        cases.push([...ids.slice(0, mid), outOfRange, ...ids.slice(mid)]);
        cases.push(ids.slice(0, Math.max(0, ids.length - 1)));
    }
    const out = [];
    for (const ids of cases) {
        out.push({
            ids,
            decoded: await tok.decode(ids, false),
            decoded_skip_special: await tok.decode(ids, true),
        });
    }
    return out;
}

// The token of a tokenizer_config.json field: "text" or a serialized {"content": "text"}.
function configToken(config, key) {
    const v = config[key];
    if (v === undefined || v === null) return null;
    return typeof v === 'string' ? v : v.content;
}

// What transformers adds with add_special_tokens=true beyond the tokenizer.json
// post-processor. LlamaTokenizerFast (DeepSeek V3's tokenizer_class) replaces the
// post-processor with a template built from add_bos_token / add_eos_token
// (update_post_processor), so transformers prepends <｜begin▁of▁sentence｜> (id 0) where the
// Rust library, which only sees tokenizer.json (a ByteLevel post-processor), adds nothing.
// The goldens follow transformers, which is what models are served with. Other classes
// (Qwen2Tokenizer, PreTrainedTokenizerFast) keep the post-processor of tokenizer.json.
function transformersSpecialIds(tok, name) {
    const config = JSON.parse(fs.readFileSync(path.join(assets, name, 'tokenizer_config.json'),
                                              'utf8'));
    const out = { prefix: [], suffix: [] };
    if (config.tokenizer_class !== 'LlamaTokenizerFast') return out;
    if (config.add_bos_token) out.prefix.push(tok.tokenToId(configToken(config, 'bos_token')));
    if (config.add_eos_token) out.suffix.push(tok.tokenToId(configToken(config, 'eos_token')));
    return out;
}

// A GPT-2-style tokenizer.json from a byte-level one, as src/tokenizer/gpt2_style.cpp writes
// it (tessera's `make-model --tokenizer gpt2`): same vocab, merges and added tokens, GPT-2's
// pipeline (HF's serialization of GPT-2's own file). Returns the path of the written file.
function writeGpt2Style(from) {
    const j = JSON.parse(fs.readFileSync(path.join(assets, from, 'tokenizer.json'), 'utf8'));
    j.normalizer = null;
    j.pre_tokenizer = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
    j.post_processor = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true };
    j.decoder = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };
    const dir = fs.mkdtempSync(path.join(require('os').tmpdir(), 'gpt2-style-'));
    const file = path.join(dir, 'tokenizer.json');
    fs.writeFileSync(file, JSON.stringify(j));
    return file;
}

// name: the golden's name; source: {file, config} when the tokenizer is not an asset folder.
async function generate(name, specialTokenForDecodeCases, source) {
    const tokenizerFile = source ? source.file : path.join(assets, name, 'tokenizer.json');
    const tok = Tokenizer.fromFile(tokenizerFile);
    const extra = transformersSpecialIds(tok, source ? source.config : name);
    const cases = [];
    for (const c of CASES) {
        const text = caseText(c);
        const ids = await encodeIds(tok, text, false);
        const idsWithSpecial = [...extra.prefix, ...await encodeIds(tok, text, true),
                                ...extra.suffix];
        const entry = c.hex !== undefined ? { text_bytes_hex: c.hex, text_as_js_string: text }
                                          : { text };
        entry.ids = ids;
        entry.ids_with_special = idsWithSpecial;
        entry.decoded = await tok.decode(idsWithSpecial, false);
        entry.decoded_skip_special = await tok.decode(idsWithSpecial, true);
        entry.decoded_plain = await tok.decode(ids, false);
        cases.push(entry);
    }
    const specialId = tok.tokenToId(specialTokenForDecodeCases);
    const pkg = require('tokenizers/package.json');
    const doc = {
        generator: 'tests/tokenizer/golden/generate.js',
        reference: `npm tokenizers ${pkg.version} (Hugging Face tokenizers, Node binding)`,
        tokenizer: source ? source.description : `${name}/tokenizer.json`,
        ids_with_special_added_by_transformers: extra,
        vocab_size_with_added: tok.getVocabSize(true),
        cases,
        decode_cases: await makeDecodeCases(tok, specialId),
    };
    const file = path.join(__dirname, `${name}.json`);
    fs.writeFileSync(file, JSON.stringify(doc, null, 1) + '\n');
    console.log(`${file}: ${cases.length} cases, ${doc.decode_cases.length} decode cases`);
}

(async () => {
    await generate('qwen3', '<|im_end|>');
    await generate('llama3', '<|eot_id|>');
    await generate('deepseek_v3', '<\uff5cend\u2581of\u2581sentence\uff5c>');
    await generate('mistral', '</s>');
    await generate('gpt2_style', '<|im_end|>', {
        file: writeGpt2Style('qwen3'), config: 'qwen3',
        description: 'qwen3/tokenizer.json written GPT-2 style (writeGpt2Style)' });
})().catch((e) => {
    console.error(e);
    process.exit(1);
});
