#!/usr/bin/env python3
"""Regenerates tests/data/bpe/, the fixture of tests/test_bpe.c: a small
GPT-2-style byte-level BPE tokenizer and the ids Hugging Face gives for a
fixed list of texts.

  vocab.json, merges.txt  trained here with the `tokenizers` package (BPE,
                          the ByteLevel pre-tokenizer and GPT-2's 256 byte
                          characters as the first alphabet, MERGES merges,
                          "<|endoftext|>" as a special token) on the text of
                          Debian's fortunes (/usr/share/games/fortunes),
                          then EXTRA merges added by hand at the end (their
                          tokens after the trained ones) that only a wrong
                          split would use: "' S" ('S is no contraction: the
                          pattern is case-sensitive) and "f Ã" (byte 0xC3
                          after 'f' when it is not UTF-8 is a word of its own).
  expected.json           {"cases": [{"name", "hex", "ids"}]}: each text's
                          bytes in hex and its ids from the reference below.

The reference, never mpcl's code:
  * valid UTF-8: transformers' GPT2Tokenizer loaded from the two files
    (in transformers 5 it runs the Rust `tokenizers` BPE), special tokens
    not split out (mpcl encodes "<|endoftext|>" in a text as plain text).
  * bytes that are not valid UTF-8, which no Hugging Face tokenizer takes
    (it takes only str, and Rust strings hold only UTF-8): the text decoded
    with errors="surrogateescape" (each bad byte a lone surrogate, category
    Cs, so of class "other"), cut into words by GPT-2's own pattern with the
    `regex` module (as OpenAI's encoder.py does), each word's bytes (encoded
    back with surrogateescape) merged by the same tokenizer's BPE model
    (tokenizer.backend_tokenizer.model.tokenize on the word in GPT-2's byte
    characters). For every valid text the script checks that this route
    gives GPT2Tokenizer's ids, so the two references agree where both apply.

It also reports the code points where the `regex` module's \\p{L}, \\p{N}
and \\s disagree with scripts/gen_unicode_classes.py's table (Unicode
versions differ); the texts avoid them.

Run in bench/.venv-torch (never in CI) after
`bench/.venv-torch/bin/pip install tokenizers transformers`:

    bench/.venv-torch/bin/python bench/make_bpe_fixture.py
"""

import glob
import json
import os
import sys

import regex
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import GPT2Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "bpe")
FORTUNES = "/usr/share/games/fortunes"
MERGES = 400
SPECIAL = "<|endoftext|>"
# (first, second) in GPT-2's byte characters: "Ã" is byte 0xC3.
EXTRA = [("'", "S"), ("f", "Ã")]
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# (name, text): str is encoded as UTF-8, bytes are taken as they are.
CASES = [
    ("ascii prose", "The quick brown fox jumps over the lazy dog. Then it rests, quietly."),
    ("contractions", "It's John's; they're here, we've seen it, I'm sure you'll say he'd go."),
    ("contractions upper and odd", "DON'T SHE'S 'S 're'll 'x ''s 'sfoo'"),
    ("digits", "Call 555-1234 or 3.14159 by 2024-12-05, x86_64 and 1,000,000 cats."),
    ("spaces and newlines", "a  b   c\n\nd \n e\n\n\n  f"),
    ("trailing spaces", "trailing spaces   "),
    ("leading spaces", "   leading"),
    ("only spaces", "     "),
    ("tabs", "col1\tcol2\t\tcol3\t \tend\t"),
    ("carriage returns", "line one\r\nline two\r\n"),
    ("accented latin", "café naïve Ångström Straße façade œuvre"),
    ("cjk", "日本語のテキスト、中文，한국어 text"),
    ("emoji", "emoji 😀👍🏽 ok 🇫🇷!"),
    ("unicode spaces", "a\u00a0b\u3000c\u2003d\u0085e\u2028f"),
    ("punctuation runs", "Well... (really?!) -- \"quoted\" [x] {y} <z> @#$%^&*"),
    ("endoftext as text", "one" + SPECIAL + "two"),
    ("long word", "Supercalifragilisticexpialidocious" * 3),
    ("repeated words", "the the the the cat cat the the cat"),
    ("empty", ""),
    ("invalid lone bytes", b"\xff\xfe abc \x80\x80 def"),
    ("invalid truncated", b"caf\xc3 na\xe2\x82 x\xf0\x9f\x98"),
    ("invalid among letters", b"ab\xffcd \xffxy \xc3\x28"),
    ("invalid overlong and surrogate", b"\xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80 ok"),
    ("invalid after spaces", b"a   \xff\n\n\xfe"),
    ("control bytes", b"\x00\x01\x1c\x1f\x7f nul\x00end"),
]


def fortune_texts():
    for path in sorted(glob.glob(os.path.join(FORTUNES, "*"))):
        if path.endswith(".dat") or os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            yield f.read()


def train(out_dir):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=256 + 1 + MERGES, special_tokens=[SPECIAL],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(fortune_texts(), trainer)
    tok.model.save(out_dir)
    vocab_path, merges_path = (os.path.join(out_dir, n) for n in ("vocab.json", "merges.txt"))
    with open(vocab_path, encoding="utf-8") as f:
        vocab = json.load(f)
    with open(merges_path, "a", encoding="utf-8") as f:
        for first, second in EXTRA:
            assert first in vocab and second in vocab and first + second not in vocab
            vocab[first + second] = len(vocab)
            f.write(f"{first} {second}\n")
    with open(vocab_path, "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False, separators=(",", ":"))


def reference_split(tok, data):
    """The ids by GPT-2's pattern (regex) and the tokenizer's BPE model."""
    text = data.decode("utf-8", errors="surrogateescape")
    byte_char = bytes_to_unicode()
    ids = []
    for word in regex.findall(GPT2_PATTERN, text):
        chars = "".join(byte_char[b] for b in word.encode("utf-8", errors="surrogateescape"))
        ids += [t.id for t in tok.backend_tokenizer.model.tokenize(chars)]
    return ids


def bytes_to_unicode():
    """GPT-2's byte characters (OpenAI's encoder.py)."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def class_differences():
    """Code points where `regex` and the committed table's definitions differ."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import gen_unicode_classes as g
    names = {"MPCL__UC_LETTER": r"\p{L}", "MPCL__UC_NUMBER": r"\p{N}", "MPCL__UC_SPACE": r"\s"}
    pats = {k: regex.compile(p) for k, p in names.items()}
    diff = []
    for cp in range(0x110000):
        ours = g.code_point_class(cp)
        theirs = [k for k, p in pats.items() if p.match(chr(cp))]
        if [ours] != theirs and not (ours is None and not theirs):
            diff.append(cp)
    return diff


def main():
    os.makedirs(OUT, exist_ok=True)
    train(OUT)
    tok = GPT2Tokenizer(vocab=os.path.join(OUT, "vocab.json"),
                        merges=os.path.join(OUT, "merges.txt"))
    cases = []
    for name, text in CASES:
        data = text.encode("utf-8") if isinstance(text, str) else text
        ids = reference_split(tok, data)
        try:
            valid = data.decode("utf-8")
        except UnicodeDecodeError:
            valid = None
        if valid is not None:
            hf = tok(valid, add_special_tokens=False, split_special_tokens=True)["input_ids"]
            if hf != ids:
                sys.exit(f"{name}: GPT2Tokenizer gives {hf}, the pattern and BPE model {ids}")
        cases.append({"name": name, "hex": data.hex(), "ids": ids})
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump({"cases": cases}, f, indent=1)
        f.write("\n")
    diff = class_differences()
    print(f"{len(cases)} cases; {len(diff)} code points where regex's classes differ from the "
          f"table's (first: {', '.join('U+%04X' % c for c in diff[:5])})")


if __name__ == "__main__":
    main()
