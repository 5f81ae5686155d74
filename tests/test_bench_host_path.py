"""bench/host_path.py (the stdlib's host path per call against the stand-in driver) runs on the
CPU, times each op it is asked for with torch tensors and DeviceArrays, and compares with an
earlier run's JSON."""
import json

from bench import host_path


def test_host_path_times_the_ops_it_is_asked_for_and_compares(tmp_path, capsys):
    out = tmp_path / "after.json"
    assert host_path.main(["--calls", "3", "--rounds", "1", "--ops", "softmax,mul", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert set(doc["ops"]) == {"softmax", "mul"}
    assert all(0 < us < 1e5 for r in doc["ops"].values() for us in (r["torch"], r["DeviceArray"]))
    before = tmp_path / "before.json"
    doc["ops"]["softmax"]["torch"] = 123.45
    before.write_text(json.dumps(doc))
    assert host_path.main(["--calls", "2", "--rounds", "1", "--ops", "softmax", "--compare", str(before)]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = next(ln for ln in lines[-3:] if ln.startswith("softmax"))
    assert "123.45" in row and "torch before" in lines[-2]
