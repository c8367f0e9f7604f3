"""`python -m eval.report` from the repository root: the same as `ordergrad-eval report`."""

from ordergrad_trl.evaluation.cli import stage_main


def main(argv: list[str] | None = None) -> dict:
    return stage_main("report", argv, prog="eval.report")


if __name__ == "__main__":
    main()
