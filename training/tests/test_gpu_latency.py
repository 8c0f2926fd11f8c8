"""training/gpu/latency.py (the reader's cost per request on the device's GPU) runs here on the CPU, tiny."""
import importlib.util
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def test_latency_script_measures_prefill_and_decode_on_cpu(capsys):
    spec = importlib.util.spec_from_file_location("gpu_latency", os.path.join(HERE, "..", "gpu", "latency.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    res = mod.main(["--device", "cpu", "--tokens", "4", "7", "--decode", "2", "--reps", "1", "--warmup", "0"])
    assert res["params_m"] > 100  # reader135's architecture, not a toy
    assert [(r["dtype"], r["tokens"]) for r in res["runs"]] == [("float32", 4), ("float32", 7), ("bfloat16", 4),
                                                                 ("bfloat16", 7)]
    assert all(r["prefill_ms_p50"] > 0 and r["decode_step_ms_p50"] > 0 for r in res["runs"])
    assert '"prefill_ms_p50"' in capsys.readouterr().out
