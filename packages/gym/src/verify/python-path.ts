/*
 * `sitecustomize.py` for every Python a verifier starts (on PYTHONPATH, from a folder of ours). With
 * PYTHONSAFEPATH no workspace folder is on sys.path; this puts back the one plain Python would put
 * first (the working directory for `-c`, `-m` and stdin, else the script's folder) but *last*, after
 * the standard library and installed packages: checks that test the agent's code still import it
 * (`python3 -m unittest`, `python3 -c "from solution import f"`), and a `json.py` beside it never
 * replaces the standard library's. Only inside the workspace (STEPWISE_PYTHON_WORKSPACE, its path in
 * the sandbox); never an error.
 */
export const PYTHON_SITECUSTOMIZE = String.raw`import os as _os, sys as _sys

def _stepwise_workspace_last():
    root = _os.environ.get("STEPWISE_PYTHON_WORKSPACE", "")
    if not root.startswith("/"):
        return
    argv0 = _sys.argv[0] if getattr(_sys, "argv", None) else ""
    if argv0 in ("", "-", "-c", "-m"):
        folder = _os.getcwd()
    else:
        folder = _os.path.dirname(_os.path.abspath(argv0))
    if (folder == root or folder.startswith(root + "/")) and folder not in _sys.path:
        _sys.path.append(folder)

try:
    _stepwise_workspace_last()
except Exception:
    pass
del _stepwise_workspace_last
`;
