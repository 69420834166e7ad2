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
