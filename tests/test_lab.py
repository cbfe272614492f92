"""`make lab` as a learner starts it: it answers on its port (as root too), each chapter is listed once,
a chapter's .py opens as the notebook with its stored outputs, and a save writes both paired files.

The server runs on a copy of one chapter pair (plus chapters/jupytext.toml) in a temporary folder, so
the save does not touch the course; `LAB_DIR` is the Makefile's own knob for the server's root.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = "00_introduction"
TOKEN = "k3lite-lab-test"
START_TIMEOUT_S = 90

pytest.importorskip("jupyterlab")
pytest.importorskip("jupytext")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def api(port: int, path: str, *, method: str = "GET", body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/{path}", data=data, method=method,
                                     headers={"Authorization": f"token {TOKEN}",
                                              "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"{}")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    lab_dir = tmp_path_factory.mktemp("lab")
    for name in (f"{CHAPTER}.py", f"{CHAPTER}.ipynb", "jupytext.toml"):
        shutil.copy2(ROOT / "chapters" / name, lab_dir / name)
    port = free_port()
    args = f"--no-browser --port={port} --ServerApp.token={TOKEN} --ServerApp.ip=127.0.0.1"
    process = subprocess.Popen(["make", "-s", "lab", f"LAB_DIR={lab_dir}", f"LAB_ARGS={args}"], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while True:
            if process.poll() is not None:
                pytest.fail(f"make lab exited with {process.returncode}:\n{process.stdout.read()[-3000:]}")
            try:
                api(port, "status")
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"make lab did not answer on port {port} within {START_TIMEOUT_S} s")
                time.sleep(0.5)
        yield port, lab_dir
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def test_lab_answers_on_its_port(lab):
    port, _ = lab
    assert "started" in api(port, "status")


def test_each_chapter_is_listed_once(lab):
    port, _ = lab
    names = sorted(item["name"] for item in api(port, "contents")["content"])
    assert names == [f"{CHAPTER}.ipynb"], names


def test_py_opens_as_the_notebook_with_outputs(lab):
    port, _ = lab
    model = api(port, f"contents/{CHAPTER}.py?type=notebook&content=1")
    assert model["type"] == "notebook"
    code_cells = [cell for cell in model["content"]["cells"] if cell["cell_type"] == "code"]
    assert code_cells, "the notebook has no code cells"
    assert any(cell["outputs"] for cell in code_cells), "the paired notebook's outputs were not loaded"
    assert model["content"]["metadata"].get("kernelspec"), "the notebook asks for a kernel"


def test_a_save_updates_both_files(lab):
    port, lab_dir = lab
    model = api(port, f"contents/{CHAPTER}.ipynb?type=notebook&content=1")
    marker = "# saved from JupyterLab by tests/test_lab.py"
    model["content"]["cells"].append({"cell_type": "code", "source": marker, "metadata": {},
                                      "outputs": [], "execution_count": None})
    api(port, f"contents/{CHAPTER}.ipynb", method="PUT",
        body={"type": "notebook", "format": "json", "content": model["content"]})
    assert marker in (lab_dir / f"{CHAPTER}.ipynb").read_text(encoding="utf-8")
    assert marker in (lab_dir / f"{CHAPTER}.py").read_text(encoding="utf-8")
