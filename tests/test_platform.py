"""Platform loading, the shipped platforms, their source comments, and routes."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from importlib import resources
from pathlib import Path

import pytest

from mapper.cli import main
from mapper.costing.efficiency import EFF_COMPUTE, EFF_MEMORY
from mapper.platform.loader import list_platforms, load_platform, parse_platform

SHIPPED = ("a100-mig", "cpu-gpu-fpga", "cpu-server", "dev-vm", "dgx-a100", "dgx-b200-superpod", "dgx-b200", "dgx-h100-superpod",
           "dgx-h100", "dgx-h200-superpod", "dgx-h200", "dgx1-v100", "exynos2400", "fleet-a100-l4", "fleet-a100-v100",
           "fleet-h100-a100-v100", "gb200-nvl72", "gb200-tray", "h100-mig", "heft3", "jetson-orin", "l4-node",
           "l40s-node", "loihi", "mixed-gpu", "sd8gen3", "selene",
           "workstation")


def _shipped_texts():
    root = resources.files("mapper.platforms")
    return {p.name: p.read_text(encoding="utf-8") for p in root.iterdir() if p.name.endswith(".toml")}


def test_list_platforms_names_every_shipped_file_in_order():
    names = [n for n, _ in list_platforms()]
    assert tuple(names) == SHIPPED
    assert all(desc for _, desc in list_platforms())


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_platform_loads(name):
    p = load_platform(name)
    assert p.name == name and p.source == f"{name}.toml"
    assert p.host == next((d.name for d in p.devices if d.kind == "cpu"), None)
    assert [d.index for d in p.devices] == list(range(len(p.devices)))
    assert [lk.index for lk in p.links] == list(range(len(p.links)))


_NUMBER = re.compile(r"[-+]?(\d|\.\d|inf|nan)")


def _uncommented(text: str) -> list[str]:
    """Lines assigning a number (or a table of numbers) with no comment on them or above."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        m = re.match(r"\s*([A-Za-z_][\w.]*)\s*=\s*(.*)", line)
        if not m:
            continue
        value = m.group(2).split("#", 1)[0]
        if value.lstrip().startswith('"') or not _NUMBER.search(value):
            continue
        same_line = "#" in m.group(2)
        above = i > 0 and lines[i - 1].lstrip().startswith("#")
        if not (same_line or above):
            out.append(f"{i + 1}: {line.strip()}")
    return out


def test_every_numeric_field_in_a_shipped_platform_cites_a_source():
    missing = [f"{fname}:{row}" for fname, text in _shipped_texts().items() for row in _uncommented(text)]
    assert not missing, "numbers without a source comment:\n" + "\n".join(missing)


def test_source_comment_check_catches_an_uncommented_number():
    text = (
        'name = "x"\n[[device]]\nname = "c"\nkind = "cpu"\n'
        "launch_us = 2.0  # measured\n# datasheet\nmemory_gib = 4\n"
        "mem_bandwidth_gbs = 10.0\npeak_gflops = { f32 = 1.0 }\nstreaming = true\n"
    )
    assert _uncommented(text) == ["8: mem_bandwidth_gbs = 10.0", "9: peak_gflops = { f32 = 1.0 }"]


def test_host_platform_reproduces_the_measurements_its_comments_state():
    """dev-vm.toml is written by `mapper calibrate`: each stored rate times the model's
    efficiency factor gives the measured figure its comment states."""
    import re
    from importlib import resources

    text = (resources.files("mapper.platforms") / "dev-vm.toml").read_text()
    cpu = load_platform("dev-vm").devices[0]
    for dt in ("f32", "f64"):
        line = re.search(rf"# {dt} matmul .*", text).group(0)
        measured = float(re.search(r": ([0-9.]+) GFLOP/s", line).group(1))
        raised = re.search(r"raised x([0-9.]+)", line)  # to the GEMM shape fit's asymptotic rate
        measured *= float(raised.group(1)) if raised else 1.0
        assert cpu.peak(dt) * EFF_COMPUTE["cpu"]["gemm"] == pytest.approx(measured, rel=2e-3)
    measured = float(re.search(r"# add of two .*?: ([0-9.]+) GB/s", text).group(1))
    assert cpu.mem_bandwidth_gbs * EFF_MEMORY["cpu"] == pytest.approx(measured, rel=2e-3)
    # the cache roofline's keys and the per-class efficiencies come with it
    assert cpu.cache_mib is not None and cpu.cache_bandwidth_gbs > cpu.mem_bandwidth_gbs
    assert dict(cpu.efficiency).get("gemm", 0) > 0


def test_datasheet_figures():
    ws = load_platform("workstation")
    gpu = ws.devices[ws.device_index("gpu0")]
    assert (gpu.peak("f32"), gpu.peak("f64"), gpu.peak("f16"), gpu.mem_bandwidth_gbs) == (19500, 9700, 78000, 1555)
    assert (gpu.tensor_peak("f16"), gpu.tensor_peak("bf16"), gpu.tensor_peak("f64"), gpu.tensor_peak("i8")) == (
        312000, 312000, 19500, 624000)
    assert gpu.f32_matmul == "tf32" and gpu.tensor_peak("f32") == 156000  # TF32, the frameworks' default
    assert (gpu.compute_units, gpu.gemm_tile, gpu.fuses) == (108, (128, 128, 32), True)
    fpga = load_platform("cpu-gpu-fpga").devices[2]
    assert (fpga.kind, fpga.area, fpga.clock_mhz, fpga.streaming, fpga.mem_bandwidth_gbs) == ("fpga", 9024, 300, True, 460)
    assert fpga.peak("f32") == pytest.approx(9024 / 5 * 2 * 0.3, rel=1e-4)


def test_minimal_platform_with_names_and_kinds_only():
    p = parse_platform('name = "m"\n[[device]]\nname = "a"\nkind = "gpu"\n[[device]]\nname = "b"\nkind = "cpu"\n')
    assert [(d.name, d.kind, d.peak_gflops, d.has_rates) for d in p.devices] == [
        ("a", "gpu", (), False), ("b", "cpu", (), False)]
    assert p.host == "b"  # the first cpu
    assert p.description == "" and p.links == ()
    assert p.route(0, 1) is None and p.route(1, 1) == ()


def test_no_cpu_means_no_host_and_explicit_host_wins():
    text = 'name = "g"\n[[device]]\nname = "g0"\nkind = "gpu"\n[[device]]\nname = "g1"\nkind = "gpu"\n'
    assert parse_platform(text).host is None
    assert parse_platform('host = "g1"\n' + text).host == "g1"


def test_bidirectional_links_and_routes():
    p = load_platform("cpu-gpu-fpga")
    assert [(lk.src, lk.dst) for lk in p.links] == [
        ("cpu0", "gpu0"), ("gpu0", "cpu0"), ("cpu0", "fpga0"), ("fpga0", "cpu0")]
    cpu, gpu, fpga = (p.device_index(n) for n in ("cpu0", "gpu0", "fpga0"))
    assert p.route(gpu, fpga) == (1, 2)  # gpu0 -> cpu0 -> fpga0 through host memory
    assert p.route(fpga, gpu) == (3, 0)
    assert p.route(cpu, gpu) == (0,)


def test_dgx_gpus_talk_over_nvlink_directly():
    p = load_platform("dgx-a100")
    assert p.summary() == "1 cpu, 8 gpu"
    assert [s.name for s in p.switches] == ["nvswitch", "pcie01", "pcie23", "pcie45", "pcie67"]
    assert len(p.links) == 8 * 7 + 4 * 4  # ordered port pairs; a GPU pair keeps its NVSwitch path
    route = p.route(p.device_index("gpu3"), p.device_index("gpu6"))
    assert len(route) == 1 and p.links[route[0]].bandwidth_gbs == 300.0 and p.links[route[0]].switch == "nvswitch"
    # one GPU's egress port is shared by all its peers: gpu3 -> gpu6 and gpu3 -> gpu1 hold the same port
    other = p.route(p.device_index("gpu3"), p.device_index("gpu1"))
    assert set(p.resources(route[0])) & set(p.resources(other[0]))
    # gpu0 and gpu1 share the PCIe uplink to the CPU; gpu2 does not
    up0, up1, up2 = (p.route(p.device_index(g), p.device_index("cpu0"))[0] for g in ("gpu0", "gpu1", "gpu2"))
    assert set(p.resources(up0)) & set(p.resources(up1)) and not set(p.resources(up0)) & set(p.resources(up2))


def test_load_by_path_and_by_name_agree(tmp_path):
    text = _shipped_texts()["workstation.toml"]
    path = tmp_path / "ws.toml"
    path.write_text(text)
    by_path = load_platform(str(path))
    by_name = load_platform("workstation")
    assert by_path.devices == by_name.devices and by_path.links == by_name.links
    assert by_path.source == str(path)


def test_cli_platforms_one_line_each(capsys):
    assert main(["platforms"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in lines] == list(SHIPPED)
    dgx = lines[SHIPPED.index("dgx-a100")]
    assert "1 cpu, 8 gpu" in dgx and "DGX A100" in dgx
    assert main(["platforms", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    first = data[SHIPPED.index("cpu-gpu-fpga")]
    assert first["name"] == "cpu-gpu-fpga" and first["devices"] == ["cpu0", "gpu0", "fpga0"]


def test_wheel_ships_every_platform_file(tmp_path):
    """Build a wheel from a copy of the tree; every platforms/*.toml must be inside."""
    pytest.importorskip("setuptools")
    pytest.importorskip("wheel")
    root = Path(__file__).resolve().parent.parent
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(root / name, src / name)
    for pkg in ("mapper", "grammar", "platforms", "kernels"):
        shutil.copytree(root / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "-q", "-w", "dist"],
        cwd=src, check=True, capture_output=True, timeout=300,
    )
    (wheel,) = (src / "dist").glob("mapper-*.whl")
    inside = {n for n in zipfile.ZipFile(wheel).namelist() if n.startswith("mapper/platforms/")}
    expected = {f"mapper/platforms/{p.name}" for p in (root / "platforms").glob("*.toml")}
    assert expected and expected <= inside
