// Encodes a corpus split (JSON lines from corpus.py) with the final tokenizer.json into a
// little-endian uint16 id stream: each document rendered as the chat template renders it,
// followed by <|endoftext|>. Hugging Face's own encoder does this, so the training ids are
// exactly what a Hugging Face tokenizer gives for the same text.
// With GOLDEN_JSONL, every 12th document's rendered text and ids are also written there, one
// {"text", "ids"} per line: the goldens tessera's own tokenizer is tested against.
// Usage: node encode_corpus.js TOKENIZER_JSON SPLIT_JSONL OUT_BIN [GOLDEN_JSONL]
const fs = require("fs");
const { Tokenizer } = require("tokenizers");

function render(doc) {
  if (doc.text !== undefined) return doc.text + "<|endoftext|>";
  const turns = doc.messages.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`);
  return turns.join("") + "<|endoftext|>";
}

async function main() {
  const [tokenizerPath, splitPath, outPath, goldenPath] = process.argv.slice(2);
  const tokenizer = Tokenizer.fromFile(tokenizerPath);
  const docs = fs.readFileSync(splitPath, "utf8").split("\n").filter((l) => l.length);
  const chunks = [];
  const golden = [];
  let total = 0;
  for (let i = 0; i < docs.length; i += 2000) {
    const texts = docs.slice(i, i + 2000).map((l) => render(JSON.parse(l)));
    const encodings = await tokenizer.encodeBatch(texts, { addSpecialTokens: false });
    encodings.forEach((e, j) => {
      const ids = Uint16Array.from(e.getIds());
      if ((i + j) % 12 === 0) golden.push(JSON.stringify({ text: texts[j], ids: Array.from(ids) }));
      chunks.push(ids);
      total += ids.length;
    });
  }
  const out = new Uint16Array(total);
  let at = 0;
  for (const c of chunks) { out.set(c, at); at += c.length; }
  fs.writeFileSync(outPath, Buffer.from(out.buffer));
  if (goldenPath) fs.writeFileSync(goldenPath, golden.join("\n") + "\n");
  console.log(`${docs.length} documents, ${total} tokens -> ${outPath}`);
}
main();
