"""MATH for verl: train and test parquet files with the columns verl's RL dataset reads.

    python recipes/verl/prepare_math.py --out_dir ~/data/ordergrad_math

Train: MATH (DigitalLearningGmbH/MATH-lighteval, 7.5k problems); test: MATH-500. Prompts are this project's
(`ordergrad_trl.tasks.data`: the problem, then "Please reason step by step, and put your final answer within
\\boxed{}."), so verl and the TRL recipe train on the same text. Each row:

    data_source   the set's Hub id
    prompt        chat messages, [{"role": "user", "content": ...}] (verl applies the model's chat template)
    ability       "math"
    reward_model  {"style": "rule", "ground_truth": <answer>}: what `ordergrad_trl.integrations.verl_reward` scores
    extra_info    {"split", "index", "id"}

`--local` reads the benchmark files of ../shared/data instead of the Hub (test splits only).
Runs in the verl environment (needs `datasets` and `pandas`, which verl brings; no TRL).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ordergrad_trl.tasks.data import load_math_dataset
from ordergrad_trl.tasks.sets import get_math_set


def verl_rows(name: str, split: str | None, local: bool) -> list[dict]:
    spec = get_math_set(name)
    data = load_math_dataset(name, split, local=local, keep_metadata=False)
    split = split or spec.default_split
    return [
        {
            "data_source": spec.hub_id,
            "prompt": row["prompt"],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": row["answer"]},
            "extra_info": {"split": split, "index": i, "id": str(row["id"])},
        }
        for i, row in enumerate(data)
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out_dir", required=True, help="where train.parquet and test.parquet go")
    parser.add_argument("--train_set", default="math", help="a set name of ordergrad_trl.tasks.sets (default: math)")
    parser.add_argument("--train_split", default=None, help="default: the set's default split")
    parser.add_argument("--test_set", default="math500", help="default: math500")
    parser.add_argument("--local", action="store_true",
                        help="read ../shared/data files ($ORDERGRAD_SHARED_DATA) instead of the Hub; they hold test "
                             "splits only, so pass a --train_set that has one, e.g. --train_set math500")
    args = parser.parse_args(argv)

    import pandas as pd

    out = Path(args.out_dir).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    for file, name, split in (("train", args.train_set, args.train_split), ("test", args.test_set, None)):
        try:
            rows = verl_rows(name, split, args.local)
        except (ValueError, FileNotFoundError, ConnectionError) as err:  # a set without a local file, the Hub down
            hint = "" if args.local else " (offline: --local reads the test sets in ../shared/data)"
            parser.exit(2, f"{parser.prog}: error: --{file}_set {name}: {' '.join(str(err).split())}{hint}\n")
        pd.DataFrame(rows).to_parquet(out / f"{file}.parquet")
        print(f"{out / f'{file}.parquet'}: {len(rows)} rows of {name}")


if __name__ == "__main__":
    main()
