#!/usr/bin/env bash
# Builds, locally, the two base images the Dockerfile names, for machines that
# cannot pull from a registry (this project's: only Debian's mirror and the Go
# module proxy answer). The Dockerfile itself is then what `podman build`
# runs, unchanged:
#
#   docker.io/library/golang:$GO_VERSION        (FROM golang:${GO_VERSION} AS build)
#     Debian bookworm (minbase, from Debian's mirror by mmdebstrap) with
#     ca-certificates, git and netbase, and this machine's Go toolchain in
#     /usr/local/go; the environment of the official image (PATH, GOPATH=/go,
#     GOTOOLCHAIN=local, WORKDIR /go). Unlike the official image it has no C
#     compiler (the Dockerfile builds with CGO_ENABLED=0), and it trusts the
#     machine's own CA certificates, if any, in /usr/local/share/ca-certificates
#     (a TLS-inspecting proxy's), so that the build reaches the module proxy.
#   gcr.io/distroless/static-debian12:nonroot  (FROM … AS base)
#     what distroless/static holds, taken from the same Debian root: CA
#     certificates, tzdata, netbase's /etc files, os-release, /etc/passwd and
#     /etc/group with root, nobody and nonroot (65532), /tmp (1777),
#     /home/nonroot; user 65532, no shell, no libc, no package manager.
#
# Names and the Go version are read from the Dockerfile's FROM and ARG lines;
# the installed Go must be that minor version. `--print-names` prints the two
# names and exits. Images that already exist are kept (delete them with
# scripts/podman.sh rmi to rebuild): the first run took 7 minutes on this
# project's 2-core machines under load (mmdebstrap's download and unpack 5 of
# them), a run with both images there takes a second. Needs root (mmdebstrap
# and podman as root); installs podman, runc and mmdebstrap from Debian when
# missing. DEBIAN_MIRROR overrides the mirror (default: the first of apt's
# sources, else http://deb.debian.org/debian).
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf 'container-base-images: %s\n' "$*" >&2; }
podman() { bash scripts/podman.sh "$@"; }
start=$SECONDS

# ---- what the Dockerfile names ---------------------------------------------
go_version=$(sed -n 's/^ARG GO_VERSION=\([0-9.]*\)$/\1/p' Dockerfile)
# shellcheck disable=SC2016 # the Dockerfile's ${GO_VERSION}, literally
build_from=$(sed -n 's/^FROM .*golang:\${GO_VERSION} AS build$/golang:${GO_VERSION}/p' Dockerfile)
static_from=$(sed -n 's/^FROM \(gcr\.io\/distroless\/[^ ]*\) AS base$/\1/p' Dockerfile)
if [ -z "$go_version" ] || [ -z "$build_from" ] || [ -z "$static_from" ]; then
	log "the Dockerfile no longer has 'ARG GO_VERSION=…', 'FROM … golang:\${GO_VERSION} AS build' and 'FROM gcr.io/distroless/… AS base': update this script"
	exit 1
fi
golang_image=docker.io/library/golang:$go_version # how podman names a Docker Hub short name
static_image=$static_from
# --print-names: the two names and nothing else (deploy/deploy_test.go
# checks them against the Dockerfile without root or podman).
if [ "${1:-}" = --print-names ]; then
	printf '%s\n' "$golang_image" "$static_image"
	exit 0
fi

need=()
for img in "$golang_image" "$static_image"; do
	if podman image exists "$img" 2>/dev/null; then
		log "$img exists: kept"
	else
		need+=("$img")
	fi
done
if [ ${#need[@]} -eq 0 ]; then
	exit 0
fi

go_root=$(go env GOROOT)
go_full=$(go env GOVERSION) # go1.26.8
case "$go_full" in
go"$go_version" | go"$go_version".*) ;;
*)
	log "the Dockerfile builds with Go $go_version; this machine's go is $go_full: install Go $go_version.x"
	exit 1
	;;
esac

if [ "$(id -u)" != 0 ]; then
	log "run as root: mmdebstrap and podman build the images as root"
	exit 1
fi
if ! command -v mmdebstrap >/dev/null; then
	log "apt-get install mmdebstrap"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends mmdebstrap >/dev/null
fi
mirror=${DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
	mirror=$(sed -n 's/^URIs: *\([^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
	mirror=${mirror:-http://deb.debian.org/debian}
fi

work=$(mktemp -d /tmp/opjournal-base-images.XXXXXX)
trap 'rm -rf "$work"' EXIT

# ---- a Debian bookworm root ---------------------------------------------------
# Documentation and man pages are left out (as Debian's own slim images do),
# except the copyright files, which the static image keeps.
log "Debian bookworm (minbase + ca-certificates git netbase tzdata) from $mirror …"
t=$SECONDS
mmdebstrap --quiet --mode=root --variant=minbase --format=directory \
	--include=ca-certificates,git,netbase,tzdata \
	--dpkgopt='path-exclude=/usr/share/man/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' \
	--dpkgopt='path-exclude=/usr/share/doc/*' \
	--dpkgopt='path-include=/usr/share/doc/*/copyright' \
	bookworm "$work/debian" "$mirror" >&2
log "  root file system in $((SECONDS - t)) s ($(du -sh "$work/debian" | cut -f1))"

import() { # DIR IMAGE CHANGE… — DIR as the only layer of IMAGE
	local dir=$1 image=$2
	shift 2
	local changes=()
	for c in "$@"; do changes+=(--change "$c"); done
	tar --numeric-owner --xattrs -C "$dir" -cf "$work/layer.tar" .
	podman import --quiet "${changes[@]}" --message "built by scripts/container-base-images.sh" "$work/layer.tar" "$image" >/dev/null
	rm -f "$work/layer.tar"
	log "  $image: $(podman image inspect --format '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}')"
}

# ---- golang:$go_version ---------------------------------------------------------
if [[ " ${need[*]} " == *" $golang_image "* ]]; then
	log "$golang_image: the Debian root + $go_root ($go_full) …"
	t=$SECONDS
	root=$work/golang
	cp -a "$work/debian" "$root"
	rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"*
	mkdir -p "$root/usr/local/go" "$root/go/bin" "$root/go/src"
	# The toolchain as the official image has it: no .git, and its tests
	# are not needed to build.
	tar -C "$go_root" --exclude=./.git -cf - . | tar -C "$root/usr/local/go" -xf -
	chmod 1777 "$root/go"
	# The machine's own CA certificates (Debian's place for them), such as a
	# TLS-inspecting proxy's: the build reaches the Go module proxy as the
	# host does. Only the build image trusts them; the runtime image keeps
	# Debian's bundle.
	if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
		log "  trusting this machine's /usr/local/share/ca-certificates/*.crt in the build image"
		cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
		chroot "$root" update-ca-certificates >/dev/null 2>&1 # (its rehash warns of the bundle itself)
	fi
	import "$root" "$golang_image" \
		"ENV PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
		"ENV GOLANG_VERSION=${go_full#go}" \
		"ENV GOTOOLCHAIN=local" \
		"ENV GOPATH=/go" \
		"WORKDIR /go" \
		'CMD ["bash"]'
	rm -rf "$root"
	log "  in $((SECONDS - t)) s"
fi

# ---- distroless static, nonroot -------------------------------------------------
if [[ " ${need[*]} " == *" $static_image "* ]]; then
	log "$static_image: files of ca-certificates, tzdata, netbase and base-files from the Debian root …"
	t=$SECONDS
	d=$work/debian root=$work/static
	mkdir -p "$root"/{etc/ssl/certs,usr/share/zoneinfo,usr/share/doc,usr/lib,tmp,root,home/nonroot,var/lib/dpkg}
	cp -a "$d/etc/ssl/certs/ca-certificates.crt" "$root/etc/ssl/certs/"
	cp -a "$d/usr/share/zoneinfo/." "$root/usr/share/zoneinfo/"
	cp -a "$d/etc/services" "$d/etc/protocols" "$d/etc/rpc" "$d/etc/ethertypes" "$root/etc/"
	cp -aL "$d/etc/os-release" "$root/usr/lib/os-release"
	ln -s ../usr/lib/os-release "$root/etc/os-release"
	for pkg in base-files ca-certificates netbase tzdata; do
		mkdir -p "$root/usr/share/doc/$pkg"
		cp -a "$d/usr/share/doc/$pkg/copyright" "$root/usr/share/doc/$pkg/"
	done
	cat >"$root/etc/passwd" <<-'PASSWD'
		root:x:0:0:root:/root:/sbin/nologin
		nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
		nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
	PASSWD
	cat >"$root/etc/group" <<-'GROUP'
		root:x:0:
		nobody:x:65534:
		tty:x:5:
		staff:x:50:
		nonroot:x:65532:
	GROUP
	echo 'hosts: files dns' >"$root/etc/nsswitch.conf"
	chmod 0644 "$root/etc/passwd" "$root/etc/group" "$root/etc/nsswitch.conf"
	chmod 1777 "$root/tmp"
	chmod 0700 "$root/root" "$root/home/nonroot"
	chown 65532:65532 "$root/home/nonroot"
	# What makes it distroless: nothing to run but what is copied in.
	if [ -n "$(find "$root" \( -type f -o -type l \) \( -path '*/bin/*' -o -path '*/sbin/*' -o -name 'ld-linux*' -o -name 'libc.so*' \) -print -quit)" ]; then
		log "the static root holds a program or libc: refusing to import it"
		exit 1
	fi
	import "$root" "$static_image" \
		"ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
		"ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt" \
		"USER 65532" \
		"WORKDIR /home/nonroot"
	log "  in $((SECONDS - t)) s"
fi
log "done in $((SECONDS - start)) s"
