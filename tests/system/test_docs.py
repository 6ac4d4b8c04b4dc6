"""The docs describe the project as it is: every relative link, anchor and named raw-data path in README.md and
docs/ resolves (docs/check_links.py). A file moved or a heading renamed without its pointers fails here."""
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_doc_links_resolve():
    r = subprocess.run([sys.executable, os.path.join(REPO, "docs", "check_links.py"), REPO],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"broken links in the docs:\n{r.stdout}{r.stderr}"
