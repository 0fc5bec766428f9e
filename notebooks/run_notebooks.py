#!/usr/bin/python3
"""Executes every notebook in notebooks/ headless and reports the first failing cell of each.

    PYTHONPATH=build/python /usr/bin/python3 notebooks/run_notebooks.py [NOTEBOOK.ipynb ...]

The kernel is this interpreter (a kernelspec written into a temporary JUPYTER_PATH entry runs
``sys.executable -m ipykernel_launcher``, so the notebooks see the same numpy/torch and the same PYTHONPATH),
its working directory is notebooks/, each cell may run 300 s. The .ipynb files are read, never written: the
executed copies live in memory only (``--keep DIR`` writes them to DIR, which must not be notebooks/).
Exit status 0 when every cell of every notebook ran, 1 otherwise (naming the notebook and the cell).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
KERNEL = "roundoff-python3"


def write_kernelspec(root: Path) -> None:
    d = root / "kernels" / KERNEL
    d.mkdir(parents=True)
    spec = {"argv": [sys.executable, "-Xfrozen_modules=off", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": f"Python 3 ({sys.executable})", "language": "python",
            "env": {"PYDEVD_DISABLE_FILE_VALIDATION": "1", "MPLBACKEND": "Agg"}}
    if sys.version_info < (3, 11):
        spec["argv"].remove("-Xfrozen_modules=off")
    (d / "kernel.json").write_text(json.dumps(spec, indent=1))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("notebooks", nargs="*", type=Path, help="default: every notebooks/*.ipynb")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per cell")
    ap.add_argument("--keep", type=Path, default=None, help="write the executed notebooks into this directory")
    args = ap.parse_args(argv)

    try:
        import nbformat
        from nbclient import NotebookClient
        from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError
    except ImportError as e:
        print(f"run_notebooks: needs nbformat, nbclient and ipykernel ({e}); use /usr/bin/python3", file=sys.stderr)
        return 2
    paths = [p.resolve() for p in args.notebooks] or sorted(HERE.glob("*.ipynb"))
    if not paths:
        print("run_notebooks: no notebooks found", file=sys.stderr)
        return 2
    if args.keep is not None:
        if args.keep.resolve() == HERE:
            print("run_notebooks: --keep must not be notebooks/ (the stored notebooks are never overwritten)",
                  file=sys.stderr)
            return 2
        args.keep.mkdir(parents=True, exist_ok=True)

    failures = []
    with tempfile.TemporaryDirectory(prefix="roundoff-kernels-") as tmp:
        write_kernelspec(Path(tmp))
        os.environ["JUPYTER_PATH"] = tmp + (os.pathsep + os.environ["JUPYTER_PATH"] if os.environ.get("JUPYTER_PATH") else "")
        os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
        # the kernel runs in notebooks/: a relative PYTHONPATH (PYTHONPATH=build/python) must still point where it did
        if os.environ.get("PYTHONPATH"):
            os.environ["PYTHONPATH"] = os.pathsep.join(str(Path(e).resolve()) if e else e
                                                       for e in os.environ["PYTHONPATH"].split(os.pathsep))
        for path in paths:
            nb = nbformat.read(str(path), as_version=4)
            client = NotebookClient(nb, timeout=args.timeout, kernel_name=KERNEL,
                                    resources={"metadata": {"path": str(HERE)}})
            t0 = time.perf_counter()
            status = "ok"
            try:
                client.execute()
            except (CellExecutionError, CellTimeoutError, DeadKernelError) as e:
                status = "FAILED"
                idx, src = None, ""
                for i, cell in enumerate(nb.cells):
                    if cell.cell_type != "code":
                        continue
                    if any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
                        idx, src = i, cell.source
                        break
                if idx is None:  # a timeout or a dead kernel: the cell that was running has no execution count
                    code = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
                    ran = [i for i, c in code if c.get("execution_count")]
                    later = [(i, c) for i, c in code if not ran or i > ran[-1]]
                    if later:
                        idx, src = later[0][0], later[0][1].source
                first = src.strip().splitlines()[0] if src.strip() else ""
                msg = str(e).strip().splitlines()
                failures.append(f"{path.name}: cell {idx} (cells counted from 0, markdown included; {first!r}): {type(e).__name__}: "
                                f"{msg[-1] if msg else ''}")
                print("\n".join(msg[-25:]), file=sys.stderr)
            dt = time.perf_counter() - t0
            print(f"{status:6s} {path.name}  {dt:6.1f} s", flush=True)
            if args.keep is not None:
                nbformat.write(nb, str(args.keep / path.name))
    if failures:
        print("run_notebooks: failures:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
