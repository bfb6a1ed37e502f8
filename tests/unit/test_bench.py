"""The benchmark's pure parts: bench_serving's metric definitions, the client's chunk timing,
prompts, options, the table (a failed configuration is a row, with its diagnosis), the change
against an earlier run, the chart."""

import json

import pytest

from sglang_pve.agent import bench_client as client
from sglang_pve.config import ConfigError
from sglang_pve.config.bench import BenchOptions, bench_options
from sglang_pve.tools.bench import chart, metrics, prompts, results, runner


def test_percentile_is_numpys_linear_interpolation():
    assert metrics.percentile([1, 2, 3, 4], 50) == 2.5
    assert metrics.percentile([10, 20, 30, 40, 50], 90) == pytest.approx(46.0)
    assert metrics.percentile([7], 99) == 7


def _request(ttft, latency, itl, output_len, accept=None):
    return {
        "ttft": ttft,
        "latency": latency,
        "itl": itl,
        "output_len": output_len,
        "prompt_tokens": 201,
        "spec_accept_length": accept,
        "spec_verify_ct": None,
        "error": None,
    }


def test_run_metrics_follow_bench_serving():
    run = {
        "concurrency": 1,
        "duration_s": 4.0,
        "requests": [
            _request(0.1, 1.1, [0.01] * 100, 101, 2.5),
            _request(0.2, 2.2, [0.02] * 100, 101, 3.5),
            {**_request(0, 0, [], 0), "error": "HTTP 503: busy"},
        ],
    }
    m = metrics.run_metrics(run, {"internal_states": [{"avg_spec_accept_length": 2.9}]})
    assert m["completed"] == 2 and m["failed"] == 1 and m["errors"] == ["HTTP 503: busy"]
    assert m["output_throughput"] == pytest.approx(202 / 4.0)
    assert m["mean_ttft_ms"] == pytest.approx(150)
    assert m["mean_tpot_ms"] == pytest.approx((10 + 20) / 2)  # (latency - ttft) / (tokens - 1)
    assert m["median_itl_ms"] == pytest.approx(15)  # pooled over both requests
    assert m["accept_length"] == 2.9 and m["request_accept_length"] == pytest.approx(3.0)


def test_a_chunk_carrying_several_tokens_spreads_its_gap_over_them(monkeypatch):
    clock = iter([0.0, 0.05, 0.08, 0.14])
    monkeypatch.setattr(client.time, "perf_counter", lambda: next(clock))
    request = client.Request()
    request.record_chunk({"text": "a", "meta_info": {"completion_tokens": 1}})
    request.record_chunk({"text": "a b c d", "meta_info": {"completion_tokens": 4}})
    request.record_chunk({"text": "a b c d e f", "meta_info": {"completion_tokens": 6, "spec_accept_length": 2.5}})
    assert request.ttft == pytest.approx(0.05)
    assert request.itl == pytest.approx([0.01] * 3 + [0.03] * 2)
    assert request.output_len == 6 and request.to_json()["spec_accept_length"] == 2.5


def test_prompts_are_fixed_length_real_text_and_repeatable():
    first = prompts.build(4, 50, seed=42)
    assert first == prompts.build(4, 50, seed=42) != prompts.build(4, 50, seed=7)
    assert all(len(p.split()) == 50 for p in first)
    assert set(" ".join(first).split()) <= set(prompts.words())


def test_options_split_command_line_lists_and_name_unknown_configurations():
    options = BenchOptions.model_validate({"configs": "baseline,eagle3-3step", "sweep": (4, 8)})
    assert options.configs == ["baseline", "eagle3-3step"] and options.sweep == [4, 8]
    deployment = type("D", (), {"servers": {"baseline": None, "eagle3-3step": None}})()
    with pytest.raises(ConfigError) as error:
        bench_options("gpu1", {"configs": "baseline,eagle9", "output_len": 0, "sweep": "1"}, deployment)
    text = str(error.value)
    assert "configs = 'eagle9'" in text
    assert "output_len = 0" in text and "sweep" in text


def _record(name, tok_s=None, status="ok", diagnosis=None, run_id="20261130T120000Z-gpu1"):
    single = (
        None
        if tok_s is None
        else {
            "output_throughput": tok_s,
            "mean_tpot_ms": 1000 / tok_s,
            "mean_ttft_ms": 80.0,
            "median_itl_ms": 11,
            "p90_itl_ms": 12,
            "p99_itl_ms": 15,
            "accept_length": None,
            "request_accept_length": None,
        }
    )
    return {
        "run_id": run_id,
        "host": "gpu1",
        "configuration": name,
        "status": status,
        "diagnosis": diagnosis,
        "single_stream": single,
        "sweep": [],
        "startup": {"total_s": 5.0},
        "plan": {"num_prompts": 5},
    }


def test_table_has_a_row_with_the_diagnosis_for_a_configuration_that_failed_to_start(tmp_path):
    records = [
        _record("baseline", 80.0),
        _record("eagle3-2step", 92.0),
        _record("eagle3-3step", status="failed", diagnosis="stalled in cuda_graph: no log progress for 10s"),
    ]
    assert results.ratios(records) == {"baseline": 1.0, "eagle3-2step": pytest.approx(1.15)}
    text = results.render_text(records)
    assert "eagle3-3step" in text and "stalled in cuda_graph" in text and "1.150" in text
    markdown = results.render_markdown(records, "t")
    assert markdown.count("\n|") == 5 and "| eagle3-3step | failed |" in markdown
    png = chart.write_png(records, tmp_path / "c.png", "t")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_failed_start_is_diagnosed_by_its_verdict_else_by_the_switch(tmp_path):
    said = [
        "[2026-07-20 10:00:00 sglang-pve switch] starting sglang-b.service (SGLang 1.0), waiting for its gate",
        "[2026-07-20 10:00:09 sglang-pve switch] transient switch to b failed: the GPUs are not free 6s after the stop",
        "[2026-07-20 10:00:09 sglang-pve switch] reverted: a runs again. The switch to b failed: the GPUs are not free",
        '[2026-07-20 10:00:09 sglang-pve switch] switch-timings {"stop_s": 3.1, "total_s": 63.2}',
    ]
    gate = {"verdict": "failed: stalled in cuda_graph (no log progress for 5s)", "diagnosis": "/d/b.json"}
    assert runner.Start("b", False, 9.0, 3.1, gate, said).diagnosis == "stalled in cuda_graph (no log progress for 5s)"
    assert runner.Start("b", False, 9.0, 3.1, {}, said).diagnosis == "the GPUs are not free 6s after the stop"
    refused = ["sglang-pve-agent transient: no current release in /var/lib/sglang-pve/releases; run deploy.py first"]
    assert runner.Start("b", False, 0.1, 0.0, {}, refused).diagnosis == refused[0]
    assert runner.Start("b", True, 6.0, 3.1, {"verdict": "ready"}, said).diagnosis is None


def test_history_and_the_change_against_an_earlier_run(tmp_path):
    old = [_record("baseline", 80.0, run_id="20261129T120000Z-gpu1")]
    new = [_record("baseline", 88.0)]
    results.append(tmp_path, old)
    results.append(tmp_path, new)
    history = results.load(tmp_path)
    assert [json.dumps(r, sort_keys=True) for r in history] == [json.dumps(r, sort_keys=True) for r in old + new]
    earlier = results.earlier_run(history, new[0]["run_id"], "gpu1", "previous")
    assert earlier == "20261129T120000Z-gpu1"
    change = results.render_change(new, results.run_records(history, earlier, "gpu1"))
    assert "80.0 ->   88.0" in change and "+10.0%" in change


@pytest.mark.parametrize("key", ["3f9a0c1d5e7b", "12345", "true", "*star&amp", "k:v-with-colon"])
def test_the_client_reads_the_api_key_from_the_root_only_config_the_deploy_renders(tmp_path, key):
    from sglang_pve.config import load_deployment
    from sglang_pve.config.secrets import Secret
    from sglang_pve.deploy.render import server_yaml
    from tests.conftest import PROJECT, group_data

    server = load_deployment("sglang1", group_data("all"), PROJECT).servers["baseline"]
    path = tmp_path / "baseline.yaml"
    path.write_text(server_yaml(server, {"api-key": Secret(key, "test")}))  # PyYAML quotes some of these
    assert client.read_api_key(str(path)) == key
    path.write_text(server_yaml(server))
    assert client.read_api_key(str(path)) is None and client.read_api_key(None) is None


def test_every_request_of_the_client_carries_the_bearer_key(tmp_path):
    """A real HTTP server that answers 401 without the key, as SGLang does with --api-key."""
    import http.server
    import threading

    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def _reply(self, body: bytes):
            seen.append((self.command, self.path, self.headers.get("Authorization")))
            ok = self.headers.get("Authorization") == "Bearer s3cret"
            self.send_response(200 if ok else 401)
            self.send_header("Content-Length", str(len(body) if ok else 0))
            self.end_headers()
            self.wfile.write(body if ok else b"")

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self._reply(b'data: {"text": "a", "meta_info": {"completion_tokens": 1}}\n\ndata: [DONE]\n\n')

        def do_GET(self):
            self._reply(b'{"version": "sim"}')

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        assert client.generate("127.0.0.1", port, "hi", 1, "s3cret").error is None
        assert client.get_json("127.0.0.1", port, "/server_info", "s3cret") == {"version": "sim"}
        assert client.generate("127.0.0.1", port, "hi", 1).error.startswith("HTTP 401")  # the gap this closes
    finally:
        server.shutdown()
        server.server_close()
    assert [a for _, _, a in seen] == ["Bearer s3cret", "Bearer s3cret", None]
