#!/usr/bin/env bash
# Make sure a headless Chromium exists for the report's browser test.
# Installs Debian's chromium when running as root with apt-get; otherwise explains.
set -u
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || [ -n "${FAIRVISION_CHROMIUM:-}" ]; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian's chromium for the report browser test..."
  export DEBIAN_FRONTEND=noninteractive
  (apt-get update -qq && apt-get install -y -qq chromium) >/tmp/fairvision-chromium-install.log 2>&1 \
    && exit 0
  echo "could not install chromium (see /tmp/fairvision-chromium-install.log)" >&2
else
  echo "no Chromium found and cannot install it here (not root or no apt-get);" >&2
  echo "the browser test will be skipped outside CI. Set FAIRVISION_CHROMIUM=/path/to/chromium to use one." >&2
fi
if [ -n "${CI:-}" ]; then exit 1; fi
exit 0
