import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch.set_num_threads(2)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURE = os.path.join(REPO, "models", "tiny")


@pytest.fixture(scope="session")
def vnni() -> bool:
    """Whether this CPU has VNNI (AVX-512 or AVX): ONNX Runtime's u8 x s8 integer products run on other kernels
    without it, where they can saturate (its quantiser's docs: reduce_range for non-VNNI machines), so int8
    results differ from the goldens' hosts (session 22's AVX2 host)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read().split()
    except OSError:
        return False
    return "avx512_vnni" in flags or "avx_vnni" in flags


@pytest.fixture(scope="session")
def fixture_dir() -> str:
    if not os.path.exists(os.path.join(FIXTURE, "manifest.json")):
        pytest.fail(f"{FIXTURE} has no manifest.json: run `python -m icicle.fixtures --config tiny --out "
                    "../models/tiny`")
    return FIXTURE


@pytest.fixture(scope="session")
def tok(fixture_dir):
    from icicle.tokenizer import load_tok

    return load_tok(os.path.join(fixture_dir, "tokenizer.json"))


@pytest.fixture(scope="session")
def split():
    from icicle.data import make_split

    return make_split()
