"""`python -m eval.generate` from the repository root: the same as `ordergrad-eval generate`."""

from ordergrad_trl.evaluation.cli import stage_main


def main(argv: list[str] | None = None) -> dict:
    return stage_main("generate", argv, prog="eval.generate")


if __name__ == "__main__":
    main()
