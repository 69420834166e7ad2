"""`edge-export report`: HTML that stands alone, Markdown for a job summary, JUnit that CI systems
read (one case per check and threshold), JSON; defects show up by name in each."""

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import pytest

from manifests.signing import sign_bundle

pytestmark = pytest.mark.e2e
EXE = sys.executable.rsplit("/", 1)[0] + "/edge-export"


@pytest.fixture
def bundles(built, tmp_path, dev_keys):
    """The three built bundles plus a copy of the QNN one whose placement spilled to the CPU (re-signed)."""
    root = tmp_path / "artifacts"
    for r in built.values():
        shutil.copytree(r.bundle, root / r.recipe / r.bundle.parent.name / r.bundle.name)
    bad = root / "tiny-lm" / "qcs6490" / "w8a16-spilled"
    shutil.copytree(built[("qcs6490", "w8a16")].bundle, bad)
    m = json.loads((bad / "manifest.json").read_text())
    m["components"][0]["placement"]["by_provider"]["CPUExecutionProvider"] = 2
    (bad / "manifest.json").write_text(json.dumps(m))
    sign_bundle(bad, dev_keys.private)
    return root, bad


def _report(root, fmt, dev_keys, *extra):
    p = subprocess.run([EXE, "report", str(root), "--as", fmt, "--public-key", str(dev_keys.public), *extra], capture_output=True, text=True)
    return p


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.ids, self.hrefs, self.external = [], set(), [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        if "id" in a:
            self.ids.add(a["id"])
        for k in ("src", "href"):
            if k in a:
                (self.hrefs if a[k].startswith("#") else self.external).append(a[k])
        if tag == "link":
            self.external.append(a.get("href", "link"))


def test_html_is_self_contained_with_plots_per_stage_and_an_index(bundles, dev_keys):
    root, bad = bundles
    p = _report(root, "html", dev_keys)
    assert p.returncode == 0, p.stderr  # a report is written even when bundles fail (see --strict)
    html = p.stdout
    t = _Tags()
    t.feed(html)
    assert t.external == [] and "script" not in t.tags  # nothing fetched, nothing executed
    assert all(h[1:] in t.ids for h in t.hrefs) and len(t.hrefs) == 4  # the index links to each bundle's section
    # per bundle: agreement and placement charts; per stage: cosine, PSNR, PSNR distribution, max abs
    rep = json.loads(_report(root, "json", dev_keys).stdout)
    assert t.tags.count("svg") == sum(2 + 4 * len(b["stages"]) for b in rep["bundles"])
    assert "Teacher-forced token agreement by decode step" in html and "Per-call PSNR" in html
    assert html.count("<polyline") == sum(len(b["stages"]) for b in rep["bundles"])  # per-step agreement recorded by these builds
    assert "nodes off QNNExecutionProvider: 2 on CPUExecutionProvider" in html


def test_junit_lists_each_check_and_threshold_as_a_case(bundles, dev_keys):
    root, bad = bundles
    p = _report(root, "junit", dev_keys)
    tree = ET.fromstring(p.stdout)
    suites = tree.findall("testsuite")
    assert len(suites) == 4
    bundle_of = {s: s.find("properties/property[@name='bundle']").get("value") for s in suites}
    cases = {(bundle_of[s], c.get("name")): c for s in suites for c in s.findall("testcase")}
    assert int(tree.get("tests")) == len(cases)
    failed = [(b, n) for (b, n), c in cases.items() if c.find("failure") is not None]
    assert int(tree.get("failures")) == len(failed) == 1
    (where, name), = failed
    assert name == "audit.placement" and where == str(bad)
    assert "CPUExecutionProvider" in cases[(where, name)].find("failure").get("message")
    by_name = {(s.get("name"), c.get("name")) for s in suites for c in s.findall("testcase")}
    # parity figures are cases too, named by stage, component, output and metric
    assert ("tiny-lm/qcs6490/w8a16", "parity.compiled.decode.logits.min_cosine") in by_name
    assert ("tiny-lm/cpu-x86-linux/int8", "parity.quantized.decode.token_agreement") in by_name


def test_markdown_fits_a_job_summary_and_json_is_the_model(bundles, dev_keys, tmp_path):
    root, bad = bundles
    md = _report(root, "md", dev_keys).stdout
    assert md.startswith("# edge-export report: 4 bundle(s), 1 failing")
    assert "| `tiny-lm/qcs6490/w8a16` | pass | ❌ FAIL | placement |" in md
    assert "### Stage `compiled` on QNNExecutionProvider (w8a16): pass" in md
    out = tmp_path / "r.json"
    p = _report(root, "json", dev_keys, "--output", str(out), "--strict")
    assert p.returncode == 7 and out.is_file()
    rep = json.loads(out.read_text())
    assert rep["schema"] == "edge-export.report/v1" and rep["summary"]["failing"] == [str(bad)]
    qnn = next(b for b in rep["bundles"] if b["bundle"] == str(bad))
    compiled = qnn["stages"][-1]
    assert compiled["provider"] == "QNNExecutionProvider"
    assert len(compiled["decode"]["agreement_by_step"]) == compiled["decode"]["steps"]
    dist = compiled["outputs"]["decode"]["logits"]["distribution"]
    assert dist["quantiles"][0] == 0.0 and dist["psnr_db"][0] == pytest.approx(compiled["outputs"]["decode"]["logits"]["min_psnr_db"])
    assert _report(root, "pdf", dev_keys).returncode == 2


def test_a_junit_consumer_reads_the_cases_and_failures(bundles, dev_keys, tmp_path):
    """junitparser, as CI report plugins use it, sees the same counts and the failure's message."""
    from junitparser import Failure, JUnitXml

    root, bad = bundles
    out = tmp_path / "parity-junit.xml"
    assert _report(root, "junit", dev_keys, "--output", str(out)).returncode == 0
    xml = JUnitXml.fromfile(str(out))
    suites = list(xml)
    assert len(suites) == 4
    failures = [(s.name, c.name, r.message) for s in suites for c in s for r in c.result if isinstance(r, Failure)]
    assert len(failures) == 1 and failures[0][1] == "audit.placement" and "CPUExecutionProvider" in failures[0][2]
    assert sum(s.tests for s in suites) == sum(len(list(s)) for s in suites)
