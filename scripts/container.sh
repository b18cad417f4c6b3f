#!/usr/bin/env bash
# Builds Kestrel's container image from Debian packages and the project's own build (docs/deploy.md):
#
#   scripts/container.sh [BUILD_DIR] [OUT_DIR]        (defaults: build, BUILD_DIR/container)
#
# No registry base image (none is reachable here, and none is needed):
#  1. the Debian packages that hold the shared libraries `kestrel` loads (ldd, then dpkg -S) and their
#     dependencies are extracted by mmdebstrap (variant "extract": no shell, no package manager, no maintainer
#     scripts) from the local repository scripts/setup.sh downloaded (.tools/debs: nothing is downloaded
#     here), documentation and locales left out;
#  2. the binary goes to /usr/local/bin/kestrel; a non-root user (10001) and the mount points /models and
#     /tmp are added; nothing in the image needs to be written at run time (a read-only root works);
#  3. buildah makes the image from that root (no Dockerfile, no daemon): entrypoint `kestrel serve` with its
#     flags from KESTREL_* variables (KESTREL_MODEL, KESTREL_PORT, ...; docs/deploy.md), port 8080, volume
#     /models, and a HEALTHCHECK that runs `kestrel probe` (Docker's image format: podman and docker read it).
#
# Out: OUT_DIR/kestrel.tar (docker-archive: `podman load -i` / `docker load -i`), OUT_DIR/kestrel.oci.tar
# (an OCI archive), and OUT_DIR/image.txt (the tag, the packages, the sizes).
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
out="${2:-$build/container}"
binary="$build/kestrel"
[ -x "$binary" ] || { echo "container: $binary is missing: build first (scripts/build.sh)" >&2; exit 1; }
for t in mmdebstrap buildah; do
  command -v "$t" >/dev/null || { echo "container: $t is missing: run scripts/setup.sh" >&2; exit 1; }
done
version="$("$binary" --version | awk '{print $2}')"
tag="kestrel:$version"
rm -rf "$out"
mkdir -p "$out"
out="$(cd "$out" && pwd)"

# 1. The packages behind every library the binary loads (its dependencies come with them).
packages=$(ldd "$binary" | awk '/=>/ {print $3} /ld-linux/ {print $1}' | while read -r lib; do
  dpkg -S "$(readlink -f "$lib")" 2>/dev/null || dpkg -S "$lib"
done | cut -d: -f1 | sort -u | paste -sd, -)
[ -n "$packages" ] || { echo "container: no packages found for $binary's libraries" >&2; exit 1; }
debs="$PWD/.tools/debs"
[ -f "$debs/Packages" ] || { echo "container: $debs has no packages: run scripts/setup.sh" >&2; exit 1; }
for p in ${packages//,/ }; do
  grep -q "^Package: $p\$" "$debs/Packages" ||
    { echo "container: $binary needs $p, which is not in .tools/debs: add it to container_packages in" \
           "scripts/setup.sh and run it" >&2; exit 1; }
done
suite="$(. /etc/os-release && echo "$VERSION_CODENAME")"
mmdebstrap --quiet --variant=extract --include="$packages" \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  "$suite" "$out/rootfs" "deb [trusted=yes] copy://$debs ./" 2>"$out/mmdebstrap.log" ||
  { cat "$out/mmdebstrap.log" >&2; exit 1; }
# The extract variant leaves apt's and dpkg's own state: not needed at run time.
rm -rf "$out/rootfs/var/lib/apt" "$out/rootfs/var/cache/apt" "$out/rootfs/var/lib/dpkg" "$out/rootfs/var/log"/* \
       "$out/rootfs/usr/share/doc" "$out/rootfs/usr/share/man" "$out/rootfs/usr/share/locale"

# 2. The binary, the user, the mount points.
install -D -m 0755 "$binary" "$out/rootfs/usr/local/bin/kestrel"
strip --strip-unneeded "$out/rootfs/usr/local/bin/kestrel"
mkdir -p "$out/rootfs/etc" "$out/rootfs/models" "$out/rootfs/tmp"
chmod 1777 "$out/rootfs/tmp"
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nkestrel:x:10001:10001:kestrel:/models:/usr/sbin/nologin\n' \
  > "$out/rootfs/etc/passwd"
printf 'root:x:0:\nkestrel:x:10001:\n' > "$out/rootfs/etc/group"
# The binary starts inside the root (every library found), before it is an image.
chroot "$out/rootfs" /usr/local/bin/kestrel --version >/dev/null 2>&1 ||
  chroot "$out/rootfs" /usr/local/bin/kestrel --help >/dev/null ||
  { echo "container: kestrel does not start inside the extracted root" >&2; exit 1; }

# 3. The image (buildah's own storage under OUT_DIR: nothing global is touched).
# Docker's image format: the OCI format has no HEALTHCHECK.
export BUILDAH_FORMAT=docker
b=(buildah --root "$out/storage" --runroot "$out/run" --storage-driver vfs)
ctr=$("${b[@]}" from scratch)
"${b[@]}" copy "$ctr" "$out/rootfs/" / >/dev/null
"${b[@]}" config \
  --entrypoint '["/usr/local/bin/kestrel", "serve"]' --cmd '' \
  --user 10001:10001 --workingdir /models --port 8080/tcp --volume /models \
  --env KESTREL_HOST=0.0.0.0 --env KESTREL_PORT=8080 --env KESTREL_MODEL=/models/model.gguf \
  --healthcheck 'CMD /usr/local/bin/kestrel probe --path /health' \
  --healthcheck-interval 30s --healthcheck-timeout 10s --healthcheck-start-period 15m --healthcheck-retries 3 \
  --label org.opencontainers.image.title=kestrel --label "org.opencontainers.image.version=$version" \
  --label org.opencontainers.image.description="Kestrel LLM inference server (kestrel serve)" \
  "$ctr"
"${b[@]}" commit --quiet --format docker --rm "$ctr" "$tag" >/dev/null
"${b[@]}" push --quiet "$tag" "docker-archive:$out/kestrel.tar:$tag"
"${b[@]}" push --quiet "$tag" "oci-archive:$out/kestrel.oci.tar:$tag"
"${b[@]}" rmi --all >/dev/null
rm -rf "$out/storage" "$out/run"

size_root=$(du -sb "$out/rootfs" | cut -f1)
size_tar=$(stat -c %s "$out/kestrel.tar")
size_gz=$(gzip -c "$out/kestrel.tar" | wc -c)
{
  echo "tag: $tag"
  echo "packages: $packages"
  echo "root: $size_root bytes unpacked; image archive $size_tar bytes, $size_gz gzipped"
} > "$out/image.txt"
cat "$out/image.txt"
