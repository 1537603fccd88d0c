#!/usr/bin/python3
"""Extracts the default model's training corpus from Debian's public-domain text packages.

Sources (installed by `bash scripts/setup.sh --corpus`): dict-gcide (Webster's 1913),
dict-foldoc, dict-jargon, dict-devil, fortunes and fortunes-min. Every document becomes one
JSON line: {"id": ..., "source": ..., "messages": [{"role", "content"}...]} for chat turns
("What does apple mean?" -> its definition) or {"id", "source", "text"} for plain text.
A fixed hash of the id puts 2% of the documents in the held-out split, so the split does not
depend on file order or Python's hash seed.

Usage: scripts/default-model/corpus.py OUT_DIR  (writes train.jsonl, heldout.jsonl, tokenizer-input.txt)
"""
import gzip
import hashlib
import json
import os
import random
import re
import sys

DICTD = "/usr/share/dictd"
FORTUNES = "/usr/share/games/fortunes"
# Picture files: their text is drawing, not language.
FORTUNE_SKIP = {"art", "ascii-art"}
HELDOUT_PER_MILLE = 20

B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def dictd_number(text):
    value = 0
    for c in text:
        value = value * 64 + B64.index(c)
    return value


def dictd_entries(name):
    """(headword, entry text) in index order, as dictd's own server reads them."""
    data = gzip.open(f"{DICTD}/{name}.dict.dz").read()
    with open(f"{DICTD}/{name}.index", encoding="utf-8") as index:
        for line in index:
            head, offset, length = line.rstrip("\n").split("\t")
            if head.startswith("00-database") or head.startswith("00database"):
                continue
            start = dictd_number(offset)
            yield head, data[start:start + dictd_number(length)].decode("utf-8", "replace")


def squash(text):
    return re.sub(r"\s+", " ", text).strip()


def clean_markup(text):
    text = text.replace("{", "").replace("}", "")
    text = re.sub(r"\[(1913 )?Webster[^\]]*\]", "", text)
    text = re.sub(r"\[[A-Z]{2,4}\]", "", text)          # editors' initials, e.g. [PJC]
    return squash(text)


PARTS_OF_SPEECH = [
    ("v. t.", "verb"), ("v. i.", "verb"), ("n.", "noun"), ("a.", "adjective"),
    ("adv.", "adverb"), ("prep.", "preposition"), ("conj.", "conjunction"),
    ("interj.", "interjection"), ("pron.", "pronoun"), ("p. p.", "participle"),
]


def gcide_definition(entry):
    """(part of speech, first senses) of one Webster entry, or None when it is mostly markup."""
    depth, header_end = 0, None
    for i, c in enumerate(entry):
        if c == "[":
            depth += 1
        elif c == "]":
            depth = max(0, depth - 1)
        elif c == "\n" and depth == 0:
            header_end = i
            break
    if header_end is None:
        return None
    header, body = entry[:header_end], entry[header_end:]
    part = None
    for abbrev, name in PARTS_OF_SPEECH:
        if re.search(r"[,)\\]\s*" + re.escape(abbrev), header):
            part = name
            break
    senses = []
    for block in re.split(r"\n\s*\n", body):
        lines = [l for l in block.split("\n") if l.strip()]
        # A sense starts at the block's first line; quotations are indented further.
        kept = []
        for l in lines:
            if re.match(r"\s{8,}", l) and kept:
                break
            if "Webster" in l and l.strip().startswith("["):
                break
            kept.append(l)
        text = clean_markup(" ".join(kept))
        if not text or text.startswith("Note:") or text.startswith("Syn."):
            continue
        text = re.sub(r"^\d+\.\s*", "", text)
        text = re.sub(r"\s*--\s*[A-Z][\w. ]*\.?$", "", text)  # trailing "--Shak." citation
        if len(text) < 12:
            continue
        senses.append(text)
        if len(senses) == 2 or sum(map(len, senses)) > 220:
            break
    if not senses:
        return None
    answer = " ".join(senses)
    # Webster's transliteration codes ([ae], [=e], [^o]...) and leftover brackets.
    if re.search(r"\[[^\]]*\]|[\\\"]", answer) or len(answer) > 500:
        return None
    return part, answer


WORD_QUESTIONS = ["What does {w} mean?", "What does the word \"{w}\" mean?",
                  "Define {w}.", "What is the meaning of {w}?", "What does {w} mean?"]
COMPUTING_QUESTIONS = ["What is {w} in computing?", "What does {w} mean in computing?",
                       "Explain {w}.", "What is {w} in computing?"]
JARGON_QUESTIONS = ["What is {w} in computing?", "What does {w} mean in hacker slang?",
                    "What is {w}, in the Jargon File?"]
DEVIL_QUESTIONS = ["What is {w}, according to the Devil's Dictionary?",
                   "Give me a cynical definition of {w}."]
FORTUNE_QUESTIONS = ["Tell me a fortune.", "Give me a fortune.", "Tell me a fortune.",
                     "Say something wise.", "Tell me a quote."]


def chat(doc_id, source, question, answer):
    return {"id": doc_id, "source": source,
            "messages": [{"role": "user", "content": question},
                         {"role": "assistant", "content": answer}]}


def gcide_documents(rng):
    seen = set()
    for head, entry in dictd_entries("gcide"):
        word = head.lower()
        if word in seen or not re.fullmatch(r"[a-z][a-z' -]{1,28}", word):
            continue
        # The index also points sub-entries ("dog" in "Sundog") at their parent entry.
        if not entry.lower().startswith(word):
            continue
        found = gcide_definition(entry)
        if found is None:
            continue
        seen.add(word)
        part, definition = found
        answer = f"{head} ({part}): {definition}" if part else f"{head}: {definition}"
        yield chat(f"gcide:{word}", "gcide", rng.choice(WORD_QUESTIONS).format(w=word), answer)


def paragraphs_after_head(entry):
    """FOLDOC / Jargon entry -> its paragraphs, without the headword and pronunciation lines."""
    blocks = [b for b in re.split(r"\n\s*\n", entry) if b.strip()]
    return [clean_markup(b) for b in blocks[1:]]


def computing_documents(name, questions, rng):
    for head, entry in dictd_entries(name):
        paragraphs = [p for p in paragraphs_after_head(entry)
                      if p and not re.fullmatch(r"\(\d{4}-\d\d-\d\d\)", p)]
        if not paragraphs or not re.fullmatch(r"[\w][\w .+#/'-]{0,40}", head):
            continue
        first = re.sub(r"^<[^>]*>\s*", "", paragraphs[0])   # FOLDOC's "<domain>" tag
        first = re.sub(r"^\[[^\]]*\]\s*", "", first)          # Jargon's "[origin]" tag
        if len(first) < 20:
            continue
        answer = first if len(first) <= 600 else first[:600].rsplit(". ", 1)[0] + "."
        yield chat(f"{name}:{head}", name, rng.choice(questions).format(w=head), answer)
        body = "\n\n".join(re.sub(r"^<[^>]*>\s*", "", p) for p in paragraphs[:3])
        yield {"id": f"{name}-text:{head}", "source": name, "text": f"{head}\n\n{body}"}


def devil_documents(rng):
    for head, entry in dictd_entries("devil"):
        text = entry.strip()
        match = re.match(r"([A-Z][A-Z' -]+),\s*[a-z. ]*?\.\s+(.*)", squash(text.split("\n\n")[0]))
        if not match:
            continue
        word, definition = match.group(1).lower(), match.group(2)
        if len(definition) < 10:
            continue
        yield chat(f"devil:{word}", "devil", rng.choice(DEVIL_QUESTIONS).format(w=word),
                   f"{word.capitalize()}: {definition}")
        yield {"id": f"devil-text:{word}", "source": "devil", "text": text}


def fortune_documents(rng):
    for name in sorted(os.listdir(FORTUNES)):
        path = os.path.join(FORTUNES, name)
        if "." in name or name in FORTUNE_SKIP or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            pieces = f.read().split("\n%\n")
        for i, piece in enumerate(pieces):
            piece = piece.strip("\n%")
            spaces = piece.count(" ") / max(1, len(piece))
            if not 20 <= len(piece) <= 400 or spaces > 0.3 or "\t" in piece:
                continue
            yield chat(f"fortune:{name}:{i}", "fortunes", rng.choice(FORTUNE_QUESTIONS), piece)
            yield {"id": f"fortune-text:{name}:{i}", "source": "fortunes", "text": piece}


def is_heldout(doc_id):
    digest = hashlib.sha256(doc_id.encode()).digest()
    return int.from_bytes(digest[:4], "little") % 1000 < HELDOUT_PER_MILLE


def document_text(doc):
    if "text" in doc:
        return doc["text"]
    return "\n".join(m["content"] for m in doc["messages"])


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = random.Random(0)
    sources = [gcide_documents(rng), computing_documents("foldoc", COMPUTING_QUESTIONS, rng),
               computing_documents("jargon", JARGON_QUESTIONS, rng), devil_documents(rng),
               fortune_documents(rng)]
    counts = {}
    with open(f"{out}/train.jsonl", "w") as train, open(f"{out}/heldout.jsonl", "w") as heldout, \
            open(f"{out}/tokenizer-input.txt", "w") as tokenizer_input:
        for source in sources:
            for doc in source:
                split = "heldout" if is_heldout(doc["id"]) else "train"
                (heldout if split == "heldout" else train).write(json.dumps(doc) + "\n")
                if split == "train":
                    tokenizer_input.write(document_text(doc) + "\n")
                key = (doc["source"], "chat" if "messages" in doc else "text", split)
                counts[key] = counts.get(key, 0) + 1
    for (source, kind, split), n in sorted(counts.items()):
        print(f"{source:9s} {kind:5s} {split:8s} {n}")


if __name__ == "__main__":
    main()
