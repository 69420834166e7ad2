import subprocess
import sys


def test_help_is_fast_and_imports_no_heavy_module():
    code = "import sys; sys.argv=['edge-export','--help']\nfrom exporter.cli import main\ntry:\n main()\nexcept SystemExit as e:\n  assert e.code == 0, e.code\nheavy=[m for m in ('torch','onnxruntime','transformers','onnx') if m in sys.modules]\nprint('HEAVY', heavy)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "HEAVY []" in p.stdout
    assert "recipe" in p.stdout and "verify" in p.stdout


def test_every_command_has_help():
    for cmd in (["recipe"], ["verify"], ["recipes"], ["targets"], ["targets", "show"], ["plan"], ["matrix"], ["routes"]):
        p = subprocess.run([sys.executable, "-m", "exporter", *cmd, "--help"], capture_output=True, text=True)
        assert p.returncode == 0, (cmd, p.stderr)
        assert "Usage" in p.stdout


def _exe():
    return sys.executable.rsplit("/", 1)[0] + "/edge-export"


def test_listings_and_plans_are_written_to_stdout_in_full_when_piped():
    """`edge-export recipes | grep spark` must find the row; a pipe is not a terminal, so no cell is cut to a width."""
    from recipes import recipe_names

    p = subprocess.run([_exe(), "recipes"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    rows = [ln for ln in p.stdout.splitlines() if "spark" in ln]
    assert len(rows) >= 2 and "…" not in p.stdout
    for name in recipe_names():  # every name whole, on one line
        assert any(f" {name} " in ln for ln in p.stdout.splitlines()), name
    assert p.stderr == ""
    for cmd in (["targets"], ["targets", "show", "qcs6490"], ["routes"], ["plan", "tiny-lm", "-t", "qcs6490"]):
        p = subprocess.run([_exe(), *cmd], capture_output=True, text=True)
        assert p.returncode == 0 and p.stdout.strip() and "…" not in p.stdout, (cmd, p.stderr)
    p = subprocess.run([_exe(), "targets"], capture_output=True, text=True)
    assert any("cpu-arm64-android" in ln and "android-arm64-v8a" in ln for ln in p.stdout.splitlines())
