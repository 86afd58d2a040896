#!/usr/bin/env bash
# Debian packages the test suite uses. Idempotent; skips what is already installed.
set -euo pipefail
# openjdk-17-jdk-headless + maven: real Kafka brokers from Maven jars, javac for the Java client,
# jlink for the container image's JRE. podman + runc + busybox-static: the container provider.
# chromium: the report render tests (headless screenshot of the HTML report).
want=(openjdk-17-jdk-headless maven podman runc busybox-static haproxy tshark chromium)
missing=()
for pkg in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "installing Debian packages: ${missing[*]}"
    apt-get update -qq
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "not root: cannot install ${missing[*]}; tests that need them will skip with the reason" >&2
  fi
fi
