"""`python -m eval.run` from the repository root: the same as `ordergrad-eval run`."""

from ordergrad_trl.evaluation.cli import stage_main


def main(argv: list[str] | None = None) -> dict:
    return stage_main("run", argv, prog="eval.run")


if __name__ == "__main__":
    main()
