"""Entry point for `spark-submit`: the same validate job, the master and resources from spark-submit.

    spark-submit --master local[2] validator/spark_main.py events/ --report report.html --out parquet/

Takes the same arguments as `group-replay validate` (`--master` is ignored: spark-submit's wins).
"""

from __future__ import annotations

import sys

from validator.cli import run


def main() -> int:
    return run(sys.argv[1:], master_from_submit=True)


if __name__ == "__main__":
    sys.exit(main())
