#!/usr/bin/env bash
# Replay a directory of captures in CI: as recorded and under every built-in scenario, against the
# reference coordinator (virtual time: no broker needed), then validate with Spark. Writes JUnit XML
# (one file per scenario, one for validate) and JSON summaries for the CI system to publish.
#
#   docs/ci/replay-corpus.sh [CAPTURE_DIR] [OUT_DIR]     (defaults: fixtures/captures, group-replay-ci)
#
# Layout of OUT_DIR: events/<scenario>/events.jsonl, junit/*.xml, summary/*.json, tables/, report.html.
# Exit code: the worst of the scenarios' and validate's (0 ok, 1 differences or an expectation not
# met, 2 input or a scenario that cannot apply); every scenario and validate run whatever an earlier
# one returned, so the JUnit report is complete. The GitHub Actions and GitLab CI jobs in docs/ci/ call this script, and
# tests/test_corpus_ci.py runs it.
set -uo pipefail

captures_dir=${1:-fixtures/captures}
out=${2:-group-replay-ci}
python=${PYTHON:-python3}

shopt -s nullglob
captures=("$captures_dir"/*.pcapng)
if [ ${#captures[@]} -eq 0 ]; then
  echo "replay-corpus: no *.pcapng under $captures_dir" >&2
  exit 2
fi
rm -rf "$out"
mkdir -p "$out/events" "$out/junit" "$out/summary"

worst=0
keep() { if [ "$1" -gt "$worst" ]; then worst=$1; fi; }

# as-recorded: the recorded run vs the reference; then the built-in scenario library. One process
# replays the captures under every scenario (read once, one interpreter) and writes each scenario's
# files and exit code as its own command would; it exits with the worst of them.
scenarios=(as-recorded $("$python" -c 'from replay.scenario import builtin_names; print(*builtin_names())'))
scenario_args=()
for scenario in "${scenarios[@]}"; do scenario_args+=(--scenario "$scenario"); done
echo "== replay ${#captures[@]} captures under ${#scenarios[@]} scenarios: ${scenarios[*]}"
group-replay replay "${captures[@]}" "${scenario_args[@]}" --against reference \
  --out "$out/events/{scenario}" --progress off \
  --junit-xml "$out/junit/replay-{scenario}.xml" --summary-json "$out/summary/replay-{scenario}.json"
keep $?

echo "== validate"
group-replay validate "$out/events" --out "$out/tables" --report "$out/report.html" --progress off \
  --master "${SPARK_MASTER:-local[2]}" \
  --junit-xml "$out/junit/validate.xml" --summary-json "$out/summary/validate.json"
keep $?

echo "== worst exit code: $worst (JUnit reports in $out/junit)"
exit "$worst"
