// Trains a byte-level BPE on the corpus with Hugging Face's `tokenizers` (npm) and saves the
// untruncated result; tokenizer.py then keeps the first merges and adds the chat tokens.
// The npm binding exposes no trainer options (vocabulary 30000, no initial alphabet), which
// is why the truncation happens afterwards: BPE learns merges one at a time, so the first K
// merges of a long run are the merges a run stopped at K would have learned.
// Usage: node train_tokenizer.js CORPUS_TXT OUT_JSON   (NODE_PATH must reach `tokenizers`)
const { Tokenizer, BPE, byteLevelPreTokenizer } = require("tokenizers");

const [corpus, out] = process.argv.slice(2);
const tokenizer = new Tokenizer(BPE.empty());
tokenizer.setPreTokenizer(byteLevelPreTokenizer(false, true));
tokenizer.train([corpus]);
tokenizer.save(out, true);
console.log(`trained ${tokenizer.getVocabSize()} tokens -> ${out}`);
