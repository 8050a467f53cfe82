"""A run's folder: which run it holds and who may write to it (its backups: tasks/backups.py).

  settings.json               the flags that define the run's result, written when it starts
  .lock                       locked (flock) by the process writing to the folder
  backup/latest.weights.h5    weights, optimizer state (whose step counter says where the run
                              is) and the state of the model's random draws (dropout masks),
                              replaced atomically

Started again with the same flags, a run resumes from its backup, or reports that it has
finished; with other flags it is refused, naming them, unless --overwrite_output_dir.
Every file is written under a temporary name and renamed, so none is ever half-written.
"""

import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile

from absl import app, logging

from keras_bert.text import textfiles

SETTINGS = "settings.json"
FINISHED = "model.keras"
# The names of everything the runs of a folder wrote into it (record): what
# --overwrite_output_dir removes, and all a run folder may hold.
MANIFEST = "run_files.json"
# What a run wrote into its folder before the manifest was kept (a folder with settings.json):
# these names, and the tasks' prediction files.
RUN_FILES = (SETTINGS, FINISHED, "backup", "metrics.json", "logs", "history.json", "google",
             "huggingface")  # fmt: skip
EARLIER_PREDICTIONS = re.compile(r".+\.tsv|.+_predictions\.txt|(nbest_)?predictions\.json|"
                                 r"null_odds\.json")  # fmt: skip
# Besides the manifest's names: the lock, and the other workers' copies of a multi-worker run
# (trainer.run_dir_of).
OWN_NAMES = re.compile(r"\.lock|worker_\d+")
# What a writer killed mid-write leaves: write_atomically's and ServableModel.save's temporary
# files, removed when the folder is claimed.
LEFT_BY_A_KILL = re.compile(r"tmp\w+\.tmp|\..+\.tmp-\d+-\w+\.keras")
# Flags that change where, how or what a run reports, not what it learns.
NOT_SETTINGS = frozenset({
    "output_dir", "overwrite_output_dir", "do_train", "do_eval", "do_predict", "eval_batch_size",
    "max_eval_examples", "dev_file", "test_file", "predict_file", "diagnostic_file",
    "save_checkpoints_steps", "steps_per_loop", "strategy", "num_cpu_devices", "tpu",
    "export_dir", "verbose_errors", "log_every_steps",
})  # fmt: skip

_UMASK = os.umask(0)
os.umask(_UMASK)
_TASKS = os.path.dirname(os.path.abspath(__file__))
_LOCKS = {}  # run folder -> its locked .lock file, held until release()


def write_atomically(path, data):
    """Writes str or bytes to `path` through a temporary file in the same folder, readable as
    any other file the user creates (the umask's mode, not the temporary file's 0600); a run
    folder records its name first (`record`)."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    record(path)
    with tempfile.NamedTemporaryFile("wb", dir=folder, delete=False, suffix=".tmp") as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.fchmod(f.fileno(), 0o666 & ~_UMASK)
    os.replace(f.name, path)


def write_json(path, value):
    write_atomically(path, json.dumps(value, indent=2, sort_keys=True, default=str) + "\n")


def settings_of(flag_values, task):
    """The flags that define a run's result (every flag of ours but NOT_SETTINGS), as JSON.
    Flags of other modules (absl's; TensorFlow's TPU and pfor flags) are left out."""
    values = {"task": task}
    for module, module_flags in flag_values.flags_by_module_dict().items():
        # a binary's own flags are keyed by its file (python -m tasks.glue: .../tasks/glue.py)
        if not (module.startswith("tasks.") or os.path.dirname(os.path.abspath(module)) == _TASKS):
            continue
        values.update({f.name: f.value for f in module_flags if f.name not in NOT_SETTINGS})
    return json.loads(json.dumps(values, default=str))


# What a data digest adds after each file's bytes, so that moving bytes from one file to the
# next changes it.
FILE_END = b"\0"


def finish_digest(digest):
    """The hex digest of one file's bytes fed to `digest` (hashlib.sha256()): `data_digest`'s
    for that file alone."""
    digest.update(FILE_END)
    return digest.hexdigest()


def data_digest(paths):
    """The SHA-256 of the files' contents, in order: what a run records of its training data,
    so that data edited since is not trained on further, nor a finished run reused as if
    trained on it."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        digest.update(FILE_END)
    return digest.hexdigest()


def _read_settings(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise app.UsageError(f"{path} is unreadable ({e}); pass --overwrite_output_dir to "
                             "start the run again") from None  # fmt: skip


def record(path):
    """Adds `path`'s name to its folder's manifest, if the folder is a run's (it has one):
    called before anything is written at the top of a run folder, so that whatever a kill
    leaves there is known as the run's."""
    folder, name = os.path.split(os.path.abspath(path))
    manifest = os.path.join(folder, MANIFEST)
    if name == MANIFEST or not os.path.isfile(manifest):
        return
    names = _read_manifest(manifest)
    if name not in names:
        write_json(manifest, sorted(names | {name}))


def _read_manifest(path):
    try:
        with open(path, encoding="utf-8") as f:
            names = json.load(f)
    except (OSError, ValueError):
        names = None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise app.UsageError(f"{path} is not a list of file names (the files its folder's runs "
                             "wrote); remove the folder's run by hand, or pass another "
                             "--output_dir")  # fmt: skip
    return set(names)


def _run_files(run_dir):
    """(the names the folder's runs wrote that are there, the names nobody recorded). Left-over
    temporary files of a killed writer are removed first."""
    entries = set(os.listdir(run_dir))
    for name in sorted(entries):
        if LEFT_BY_A_KILL.fullmatch(name):
            path = os.path.join(run_dir, name)
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
            entries.discard(name)
    manifest = os.path.join(run_dir, MANIFEST)
    if os.path.isfile(manifest):
        ours = _read_manifest(manifest) | {MANIFEST}
    elif SETTINGS in entries:  # a run from before the manifest was kept
        ours = set(RUN_FILES) | {n for n in entries if EARLIER_PREDICTIONS.fullmatch(n)}
    else:
        ours = set()
    foreign = {n for n in entries - ours if not OWN_NAMES.fullmatch(n)}
    return sorted(entries & ours), sorted(foreign)


def claim(run_dir, settings, overwrite=False, finished=FINISHED):
    """Locks `run_dir` for this process and checks what it holds against `settings`.

    Returns "new", "resume" (the same run, unfinished) or "finished" (the same run, whose
    `finished` file is written: model.keras by default). A folder is a run's only if its runs
    wrote everything in it (the manifest, `record`): one that holds anything else is refused,
    with or without `overwrite`, and nothing in it is removed. A run with other settings is
    refused unless `overwrite`, which removes everything the folder's runs wrote (an old run's
    predictions too); so is one whose settings were not recorded, and a folder another writer
    holds (until `release`).
    """
    textfiles.make_folder(run_dir, "--output_dir")
    lock = open(os.path.join(run_dir, ".lock"), "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise app.UsageError(f"another run is writing to --output_dir={run_dir}; wait for it to "
                             "end, or pass another --output_dir") from None  # fmt: skip
    _LOCKS[os.path.realpath(run_dir)] = lock
    present, foreign = _run_files(run_dir)
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise app.UsageError(f"--output_dir={run_dir} holds {shown}, which no run wrote; pass "
                             "an empty or new --output_dir (--overwrite_output_dir replaces "
                             "only what runs wrote)")  # fmt: skip
    recorded = _read_settings(os.path.join(run_dir, SETTINGS))
    manifest = os.path.join(run_dir, MANIFEST)
    if overwrite and present:
        logging.warning("--overwrite_output_dir: removing the run in %s (%s)", run_dir,
                        ", ".join(present))  # fmt: skip
        for name in present:
            path = os.path.join(run_dir, name)
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    elif recorded is None and set(present) - {MANIFEST}:
        raise app.UsageError(f"--output_dir={run_dir} holds a run whose settings were not "
                             f"recorded ({', '.join(present)}); pass --overwrite_output_dir to "
                             "replace it, or another --output_dir")  # fmt: skip
    elif recorded is not None:
        differ = [k for k in sorted(recorded.keys() & settings.keys()) if recorded[k] != settings[k]]
        if differ:
            shown = "; ".join(_difference(k, recorded[k], settings[k]) for k in differ)
            raise app.UsageError(f"--output_dir={run_dir} holds a run with other settings "
                                 f"({shown}): pass --overwrite_output_dir to replace it, "
                                 "--nodo_train to use it as it is, or another --output_dir")  # fmt: skip
        if not os.path.isfile(manifest):  # a run from before the manifest was kept
            write_json(manifest, present)
        return "finished" if os.path.exists(os.path.join(run_dir, finished)) else "resume"
    write_json(manifest, [])  # first: every name written from here on is recorded in it
    write_json(os.path.join(run_dir, SETTINGS), settings)
    return "new"


def refuse_changed_flags(run_dir, flag_values, task, inputs=()):
    """For a finished run used as it is (--nodo_train): raises UsageError naming each flag the
    command line gave whose value differs from the one the run was trained with, which the
    run's model would otherwise ignore without a word. Flags in `inputs` are not compared."""
    recorded = _read_settings(os.path.join(run_dir, SETTINGS)) or {}
    now = settings_of(flag_values, task)
    differ = [k for k in sorted(recorded.keys() & now.keys() - set(inputs))
              if k in flag_values and flag_values[k].present and recorded[k] != now[k]]  # fmt: skip
    if differ:
        shown = "; ".join(_difference(k, recorded[k], now[k]) for k in differ)
        raise app.UsageError(f"--nodo_train uses the run in {run_dir} as it was trained, with "
                             f"other settings than given ({shown}): leave those flags out, or "
                             "train again with them (--do_train --overwrite_output_dir)")  # fmt: skip


def _difference(key, there, now):
    if key == "training_data_sha256":
        return f"training data SHA-256 {there[:12]}... there, {now[:12]}... now (edited since)"
    return f"--{key}={there} there, {now} now"


def release(run_dir):
    """Unlocks a folder `claim` locked (a process's exit does too)."""
    lock = _LOCKS.pop(os.path.realpath(run_dir), None)
    if lock is not None:
        lock.close()
