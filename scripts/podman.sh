#!/usr/bin/env bash
# podman with this project's settings (deploy/podman/containers.conf: runc,
# the cgroupfs manager, no default ulimits), which the machines' cgroups
# need. Arguments go to podman as they are:
#
#   scripts/podman.sh build -t ghcr.io/opjournal/opjournal:dev .
#   scripts/podman.sh run --rm --network=host ghcr.io/opjournal/opjournal:dev version
#
# A CONTAINERS_CONF already set wins. Installs podman and runc (Debian's) when
# missing and run as root.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v podman >/dev/null || ! command -v runc >/dev/null; then
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
		echo "podman.sh: podman and runc are missing; install them: apt-get install -y podman runc" >&2
		exit 1
	fi
	echo "podman.sh: apt-get install podman runc" >&2
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends podman runc >/dev/null
fi
export CONTAINERS_CONF=${CONTAINERS_CONF:-$here/deploy/podman/containers.conf}
exec podman "$@"
