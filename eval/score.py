"""`python -m eval.score` from the repository root: the same as `ordergrad-eval score`."""

from ordergrad_trl.evaluation.cli import stage_main


def main(argv: list[str] | None = None) -> dict:
    return stage_main("score", argv, prog="eval.score")


if __name__ == "__main__":
    main()
