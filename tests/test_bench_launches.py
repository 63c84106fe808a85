"""Kernel launches counted from compiled HLO (lra_lab/bench/hlo_launches.py) and the launch benchmark's
verdicts (lra_lab/bench/launches.py). The counting is checked on programs whose launches are known: a
hand-written module and a loop compiled on this CPU; the GPU compile is skipped without the plugin."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest

from lra_lab.bench import hlo_launches, launches

# entry: fusion, custom-call, a loop of 5 (2 kernels, one a scatter), a loop of unknown count
# (1 kernel in its body, 1 in its condition), a command buffer of 3 kernels, a conditional (1 or
# 2 kernels), a sort, and free instructions (parameter, tuple, get-tuple-element, bitcast)
MODULE = textwrap.dedent(
    """\
    HloModule m, is_scheduled=true

    %fused_add (p0: f32[4]) -> f32[4] {
      %p0 = f32[4]{0} parameter(0)
      ROOT %a = f32[4]{0} add(%p0, %p0)
    }

    %fused_scatter (p0: f32[4], p1: s32[2,1], p2: f32[2]) -> f32[4] {
      %p0 = f32[4]{0} parameter(0)
      %p1 = s32[2,1]{1,0} parameter(1)
      %p2 = f32[2]{0} parameter(2)
      ROOT %s = f32[4]{0} scatter(%p0, %p1, %p2), update_window_dims={}, to_apply=%fused_add
    }

    %body (t: (s32[], f32[4])) -> (s32[], f32[4]) {
      %t = (s32[], f32[4]{0}) parameter(0)
      %i = s32[] get-tuple-element(%t), index=0
      %x = f32[4]{0} get-tuple-element(%t), index=1
      %f1 = f32[4]{0} fusion(%x), kind=kLoop, calls=%fused_add
      %f2 = f32[4]{0} fusion(%f1, %i, %x), kind=kInput, calls=%fused_scatter
      ROOT %r = (s32[], f32[4]{0}) tuple(%i, %f2)
    }

    %cond (t: (s32[], f32[4])) -> pred[] {
      %t = (s32[], f32[4]{0}) parameter(0)
      ROOT %c = pred[] fusion(%t), kind=kLoop, calls=%fused_add
    }

    %command_buffer (p: f32[4]) -> f32[4] {
      %p = f32[4]{0} parameter(0)
      %k1 = f32[4]{0} fusion(%p), kind=kLoop, calls=%fused_add
      %k2 = f32[4]{0} fusion(%k1), kind=kLoop, calls=%fused_add
      ROOT %k3 = f32[4]{0} fusion(%k2), kind=kLoop, calls=%fused_add
    }

    %branch_one (p: f32[4]) -> f32[4] {
      %p = f32[4]{0} parameter(0)
      ROOT %b1 = f32[4]{0} fusion(%p), kind=kLoop, calls=%fused_add
    }

    %branch_two (p: f32[4]) -> f32[4] {
      %p = f32[4]{0} parameter(0)
      %b2 = f32[4]{0} fusion(%p), kind=kLoop, calls=%fused_add
      ROOT %b3 = f32[4]{0} copy(%b2)
    }

    ENTRY %main (x: f32[4], i: s32[]) -> f32[4] {
      %x = f32[4]{0} parameter(0)
      %i = s32[] parameter(1)
      %e1 = f32[4]{0} fusion(%x), kind=kLoop, calls=%fused_add
      %gemm = (f32[4]{0}, s8[16]{0}) custom-call(%e1), custom_call_target="__cublas$gemm"
      %g = f32[4]{0} get-tuple-element(%gemm), index=0
      %t0 = (s32[], f32[4]{0}) tuple(%i, %g)
      %w1 = (s32[], f32[4]{0}) while(%t0), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"5"}}
      %w2 = (s32[], f32[4]{0}) while(%w1), condition=%cond, body=%body
      %y = f32[4]{0} get-tuple-element(%w2), index=1
      %cb = f32[4]{0} call(%y), to_apply=%command_buffer
      %pr = pred[] constant(true)
      %cd = f32[4]{0} conditional(%i, %cb, %cb), branch_computations={%branch_one, %branch_two}
      %so = f32[4]{0} sort(%cd), dimensions={0}, to_apply=%cond
      ROOT %out = f32[4]{0} bitcast(%so)
    }
    """
)


def test_counts_of_a_module_with_known_launches():
    s = hlo_launches.summary(MODULE)
    # entry 1 + gemm 1 + loop 5 x 2 + unknown loop (body 2 + condition 2 x 1) + graph 3 + branch 2 + sort 1
    assert s["kernels"] == 1 + 1 + 10 + 4 + 3 + 2 + 1 == 22
    assert s["graph_launches"] == 1 and s["kernels_in_graphs"] == 3
    assert s["host_launches"] == 22 - 3 + 1
    assert s["while_loops"] == 2 and s["unknown_trip_loops"] == 1 and s["conditionals"] == 1
    assert s["scatters"] == 5 + 1 and s["sorts"] == 1 and s["custom_calls"] == 1
    assert s["while_loops_static"] == 2 and s["scatters_static"] == 1 and s["sorts_static"] == 1


def test_a_command_buffer_inside_a_loop_is_launched_once_per_iteration():
    module = MODULE.replace(
        "%f1 = f32[4]{0} fusion(%x), kind=kLoop, calls=%fused_add",
        "%f1 = f32[4]{0} call(%x), to_apply=%command_buffer",
    )
    s = hlo_launches.summary(module)
    assert s["graph_launches"] == 1 + 5 + 1  # the entry's, the known loop's 5, the unknown loop's 1
    assert s["kernels_in_graphs"] == 3 * 7
    assert s["kernels"] == 22 + (3 - 1) * 6


def _compiled_loop(trips: int) -> str:
    def f(x):
        return jax.lax.fori_loop(0, trips, lambda i, x: jnp.sin(x) * 2 + i, x)

    return jax.jit(f).lower(jnp.ones(8)).compile().as_text()


def test_a_compiled_loop_is_counted_its_trip_count_times():
    three, seven = (hlo_launches.parse(_compiled_loop(n)) for n in (3, 7))
    loops = [i for comp in seven.computations.values() for i in comp if i.opcode == "while"]
    assert len(loops) == 1 and loops[0].trip_count == 7
    body = hlo_launches.count(seven, loops[0].callees["body"]).kernels
    assert body >= 1  # the loop's sine-multiply-add is at least one kernel
    assert hlo_launches.count(seven).kernels - hlo_launches.count(three).kernels == 4 * body
    assert hlo_launches.count(seven).while_loops == 1


def test_verdicts_judge_targets_and_growth():
    def row(family, n, kernels):
        return {"family": family, "label": family, "length": n, "dtype": "float32", "status": "ok", "kernels": kernels}

    rows = [
        row("clustered", 1024, 1400),
        row("clustered", 4096, 1460),  # +4%: within the tolerance
        row("dispersed", 1024, 2000),
        row("dispersed", 4096, 2900),  # under the target but grows 45%
        row("softmax", 1024, 900),
        row("softmax", 4096, 900),
        row("improved_clustered", 1024, 1800),  # 4096 missing: not judged
        row("linear", 1024, 900),
        dict(row("linear", 4096, 1100), fits="does not fit"),  # XLA rematerialised: not judged
        dict(row("luna", 1024, 900), fits="fits"),
        dict(row("luna", 4096, 1100), fits="fits"),  # fits and grows 22%
    ]
    v = {x["family"]: x for x in launches.verdicts(rows)}
    assert v["clustered"]["meets"] is True and v["clustered"]["grows"] is False
    assert v["dispersed"]["meets"] is False and v["dispersed"]["grows"] is True
    assert v["softmax"]["meets"] is None and v["softmax"]["grows"] is False  # no target
    assert v["improved_clustered"]["meets"] is None
    assert v["linear"]["grows"] is None and v["linear"]["not_fitting"] == [4096]
    assert v["luna"]["grows"] is True and v["luna"]["not_fitting"] == []
    record = {
        "target_description": "1 x H100",
        "gpu_spec": "h100_sxm.txtpb",
        "gpu_spec_sha256": "0" * 64,
        "xla_flags": "",
        "rows": rows
        and [
            dict(
                r,
                host_launches=1,
                graph_launches=0,
                while_loops=0,
                sorts=0,
                scatters=0,
                custom_calls=0,
                memory_gib=1.0,
                unknown_trip_loops=0,
            )
            for r in rows
        ],
        "verdicts": list(v.values()),
        "before": {"rows": [row("clustered", 1024, 5801)]},
    }
    text = launches.markdown(record)
    assert "| clustered | 1024 | float32 | 1,400 | 5,801 |" in text and "**no**" in text
    assert "| linear | 4096 | float32 | 1,100 |" in text and "| 1.00 | **no** |" in text
    assert "one length (N=4,096: does not fit, not judged)" in text


GPU_PYTHON = os.environ.get("LRA_PREFLIGHT_GPU_PYTHON", sys.executable)


def _has_cuda_plugin() -> bool:
    probe = [
        GPU_PYTHON,
        "-c",
        "import importlib.util,sys; sys.exit(importlib.util.find_spec('jax_cuda12_plugin') is None)",
    ]
    return subprocess.run(probe, capture_output=True).returncode == 0


@pytest.mark.skipif(
    not (os.environ.get("LRA_PREFLIGHT_GPU_SPECS") and _has_cuda_plugin()),
    reason="no CUDA plugin for LRA_PREFLIGHT_GPU_PYTHON or LRA_PREFLIGHT_GPU_SPECS unset (docs/accelerators.md)",
)
def test_a_gpu_compile_of_a_known_loop_counts_its_trips(tmp_path):
    """A loop of 6 trips compiled for the H100 description: the body's kernels count 6 times."""
    from lra_lab.preflight import targets
    from lra_lab.preflight.check import child_environment, gpu_target_config

    target = targets.parse("h100")
    code = textwrap.dedent(
        """
        import json, sys, jax, jax.numpy as jnp
        from jax.experimental import topologies
        from lra_lab.bench import hlo_launches
        topo = topologies.get_topology_desc(platform="cuda", target_config=open(sys.argv[1]).read(), topology="1x1x1")
        sharding = jax.sharding.SingleDeviceSharding(topo.devices[0])
        out = {}
        for trips in (2, 6):
            def f(x):
                return jax.lax.fori_loop(0, trips, lambda i, x: jnp.tanh(x @ x) + i, x)
            arg = jax.ShapeDtypeStruct((64, 64), jnp.float32, sharding=sharding)
            module = hlo_launches.parse(jax.jit(f).lower(arg).compile().as_text())
            loops = [i for c in module.computations.values() for i in c if i.opcode == "while"]
            body = hlo_launches.count(module, loops[0].callees["body"]) if loops else None
            out[trips] = dict(trips=[i.trip_count for i in loops], body=body.kernels if body else 0,
                              total=hlo_launches.count(module).kernels)
        print(json.dumps(out))
        """
    )
    spec = tmp_path / "spec.txtpb"
    spec.write_text(gpu_target_config(target))
    done = subprocess.run(
        [GPU_PYTHON, "-c", code, str(spec)], capture_output=True, text=True, env=child_environment(target), timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = {int(k): v for k, v in __import__("json").loads(done.stdout.strip().splitlines()[-1]).items()}
    assert out[6]["trips"] == [6] and out[6]["body"] >= 2  # a GEMM and the tanh-add
    assert out[6]["total"] - out[2]["total"] == 4 * out[6]["body"]


@pytest.mark.skipif(
    not (os.environ.get("LRA_PREFLIGHT_GPU_SPECS") and _has_cuda_plugin()),
    reason="no CUDA plugin for LRA_PREFLIGHT_GPU_PYTHON or LRA_PREFLIGHT_GPU_SPECS unset (docs/accelerators.md)",
)
def test_clustered_auto_compiles_the_accelerator_path_for_a_gpu_target(tmp_path):
    """A deviceless compile for the H100 runs on the CPU backend: ``implementation="auto"`` must
    still pick what the GPU runs (no sequential seeding loop), as ``"accelerator"`` does, not the
    CPU path (``"cpu"``: farthest-point seeding, a while loop)."""
    from lra_lab.preflight import targets
    from lra_lab.preflight.check import child_environment, gpu_target_config

    code = textwrap.dedent(
        """
        import json, sys, jax, jax.numpy as jnp
        from jax.experimental import topologies
        from lra.attention.clustered import ClusteredAttention
        from lra_lab.bench import hlo_launches
        topo = topologies.get_topology_desc(platform="cuda", target_config=open(sys.argv[1]).read(), topology="1x1x1")
        sharding = jax.sharding.SingleDeviceSharding(topo.devices[0])
        x = jax.ShapeDtypeStruct((2, 64, 32), jnp.float32, sharding=sharding)
        mask = jax.ShapeDtypeStruct((2, 64), jnp.bool_, sharding=sharding)
        out = {}
        for impl in ("auto", "accelerator", "cpu"):
            m = ClusteredAttention(num_heads=2, qkv_dim=32, num_clusters=5, implementation=impl)
            params = jax.eval_shape(lambda x, mask: m.init({"params": jax.random.key(0)}, x, mask), x, mask)
            f = jax.jit(lambda p, x, mask: m.apply(p, x, mask, rngs={"attention": jax.random.key(1)})[0])
            module = hlo_launches.parse(f.lower(params, x, mask).compile().as_text())
            out[impl] = hlo_launches.static_counts(module)["while_loops_static"]
        print(json.dumps(out))
        """
    )
    target = targets.parse("h100")
    spec = tmp_path / "spec.txtpb"
    spec.write_text(gpu_target_config(target))
    done = subprocess.run(
        [GPU_PYTHON, "-c", code, str(spec)], capture_output=True, text=True, env=child_environment(target), timeout=900
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loops = __import__("json").loads(done.stdout.strip().splitlines()[-1])
    assert loops["cpu"] > 0 and loops["auto"] == loops["accelerator"] == 0, loops
