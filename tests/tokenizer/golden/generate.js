#!/usr/bin/env node
// Generates the golden files qwen3.json and llama3.json that src/tokenizer/tokenizer_test.cpp
// checks tessera's tokenizer against. The reference is Hugging Face `tokenizers` (the Rust
// library behind transformers' fast tokenizers) through its Node binding, loading the SAME
// tokenizer.json files as the C++ test, so the expected ids do not come from tessera.
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

async function generate(name, specialTokenForDecodeCases) {
    const tok = Tokenizer.fromFile(path.join(assets, name, 'tokenizer.json'));
    const cases = [];
    for (const c of CASES) {
        const text = caseText(c);
        const ids = await encodeIds(tok, text, false);
        const idsWithSpecial = await encodeIds(tok, text, true);
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
        tokenizer: `${name}/tokenizer.json`,
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
})().catch((e) => {
    console.error(e);
    process.exit(1);
});
