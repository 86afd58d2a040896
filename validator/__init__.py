"""PySpark validator: diffs expected and observed rebalances and writes the compatibility report.

Conventions (see `validator.transforms` for the details):
- Runs: `recorded`, `reference`, `broker-<version>` as in design section 4. A run named `X~N`
  (N >= 2) is the N-th repeat of run `X`; it is never compared as an observed run, it measures
  noise: a fact on which a run and its repeat disagree is unstable in that session, and every
  difference on it is labelled noise and does not fail the comparison (Diffy's idea).
- Generations are compared by ordinal (1, 2, ... in completion order), never by raw
  `generation_id`; `member_id` and `ts_ms` are never compared.
- The compatibility matrix is scenario x client x observed run. The client is the optional,
  nullable event column `client_software` (ApiVersions v3+ `name/version`, e.g.
  `librdkafka/2.6.1`; several joined with `+`), else the JoinGroup versions the session's members
  used (`JoinGroup v5+v9`). The broker version comes from `broker-<version>` run names.
- Exit codes: 0 no differences beyond noise, 1 differences, 2 usage or input error.
"""
