# Runs inside the trixie root file system (POSIX sh).
# Builds vmw_pvrdma.ko out of tree from the unmodified driver source of the
# Debian kernel source package, against the headers of the installed kernel,
# and collects the kernel, the modules named on the command line (with their
# dependencies, decompressed) and a dependency list.
# Usage: buildmod.sh OUTDIR MODULE...
set -eu
out=$1; shift
krel=$(ls /lib/modules)
case "$krel" in *" "*|"") echo "expected exactly one kernel in /lib/modules, found: $krel" >&2; exit 1;; esac
src=$(ls /usr/src/linux-source-*.tar.xz | head -n 1)
hdr=/usr/src/linux-headers-$krel
test -d "$hdr" || { echo "no headers for $krel in /usr/src" >&2; exit 1; }

b=$(mktemp -d /tmp/pvrdma.XXXXXX)
cd "$b"
top=$(basename "$src" .tar.xz)
tar -xJf "$src" "$top/drivers/infiniband/hw/vmw_pvrdma"
d=$b/$top/drivers/infiniband/hw/vmw_pvrdma
make -C "$hdr" M="$d" CONFIG_INFINIBAND_VMWARE_PVRDMA=m modules
mkdir -p "$out/modules"
cp "$d/vmw_pvrdma.ko" "$out/vmw_pvrdma-debug.ko"
strip --strip-debug -o "$out/modules/vmw_pvrdma.ko" "$d/vmw_pvrdma.ko"
cp "/boot/vmlinuz-$krel" "$out/vmlinuz"
echo "$krel" > "$out/kernel.release"
(cd /usr/src && ls -d linux-source-* | head -n 1) > "$out/source.version"
rm -rf "$b"

: > "$out/modules.deps"
todo="$*"
seen=" "
while [ -n "$(echo $todo)" ]; do
	set -- $todo
	m=$1; shift
	todo="$*"
	case "$seen" in *" $m "*) continue;; esac
	seen="$seen$m "
	if [ "$m" = vmw_pvrdma ]; then
		f=$out/modules/vmw_pvrdma.ko
	else
		f=$(modinfo -k "$krel" -F filename "$m")
	fi
	case "$f" in
	"(builtin)"|"")
		echo "$m builtin" >> "$out/modules.deps"
		continue;;
	*.ko.xz) xz -dc "$f" > "$out/modules/$m.ko";;
	*.ko.zst) zstd -qdc "$f" > "$out/modules/$m.ko";;
	*.ko.gz) gzip -dc "$f" > "$out/modules/$m.ko";;
	*.ko) [ "$f" = "$out/modules/$m.ko" ] || cp "$f" "$out/modules/$m.ko";;
	*) echo "unexpected module file $f for $m" >&2; exit 1;;
	esac
	deps=$(modinfo -F depends "$out/modules/$m.ko" | tr ',' ' ')
	echo "$m module $deps" >> "$out/modules.deps"
	todo="$todo $deps"
done
