#!/usr/bin/env bash
# Builds the lab VM's Vagrant box locally, from Debian packages only, for machines that
# cannot reach the public box catalogue (where debian/bookworm64 comes from).
#
#   sudo vagrant/build-box.sh            # then: cd vagrant && EMU_BOX=local vagrant up --provider=libvirt
#
# debootstrap puts Debian 12 (bookworm) on an ext4 partition of a sparse raw disk (a loop
# device at the partition's offset), with the kernel, openssh-server, sudo, rsync and DHCP
# on eth0; extlinux boots it (syslinux's MBR in the first sector). The user is vagrant /
# vagrant with Vagrant's insecure key (vagrant swaps it for a generated one on first up);
# the SSH host keys are made on the VM's first boot. The disk becomes a qcow2 box.img,
# packed with metadata.json and a Vagrantfile as a libvirt box and added as emu/bookworm-local.
# Needs root, debootstrap, qemu-utils, extlinux, syslinux-common, and Debian's mirror.
# Takes about 5 minutes on 2 cores; the box (an uncompressed tar) is about 1 GB. Settings (environment):
#   EMU_BOX_NAME (emu/bookworm-local), EMU_BOX_GB (20, the disk's virtual size),
#   EMU_MIRROR (http://deb.debian.org/debian), EMU_BOX_WORK (/var/tmp/emu-box, removed after).
set -euo pipefail
NAME=${EMU_BOX_NAME:-emu/bookworm-local}
GB=${EMU_BOX_GB:-20}
MIRROR=${EMU_MIRROR:-http://deb.debian.org/debian}
WORK=${EMU_BOX_WORK:-/var/tmp/emu-box}
MBR=/usr/lib/syslinux/mbr/mbr.bin
PKGS=linux-image-amd64,openssh-server,sudo,rsync,ifupdown,isc-dhcp-client,ca-certificates,python3

[ "$(id -u)" -eq 0 ] || { echo "build-box.sh: needs root (loop device, mount, chroot)" >&2; exit 2; }
for tool in debootstrap qemu-img sfdisk mkfs.ext4 extlinux losetup vagrant; do
    command -v "$tool" >/dev/null || { echo "build-box.sh: $tool missing (apt-get install debootstrap qemu-utils fdisk extlinux syslinux-common vagrant)" >&2; exit 2; }
done
[ -f "$MBR" ] || { echo "build-box.sh: $MBR missing (apt-get install syslinux-common)" >&2; exit 2; }

RAW=$WORK/disk.raw ROOT=$WORK/root LOOP=
cleanup() {
    mountpoint -q "$ROOT" && umount -R "$ROOT"
    [ -n "$LOOP" ] && losetup -d "$LOOP"
    rm -rf "$WORK"
}
trap cleanup EXIT
rm -rf "$WORK" && mkdir -p "$ROOT"

echo "==> disk: $GB GB sparse, one bootable partition from 1 MiB"
truncate -s "${GB}G" "$RAW"
echo 'start=2048, type=83, bootable' | sfdisk -q "$RAW"
LOOP=$(losetup --show -f --offset $((2048 * 512)) "$RAW")
# extlinux 6.04 (Debian 12) cannot read ext4's 64bit and metadata_csum features
mkfs.ext4 -q -L emu-root -O ^64bit,^metadata_csum "$LOOP"
UUID=$(blkid -s UUID -o value "$LOOP")
mount "$LOOP" "$ROOT"

echo "==> debootstrap bookworm from $MIRROR (reusing /var/cache/apt/archives)"
debootstrap --include="$PKGS" --cache-dir=/var/cache/apt/archives bookworm "$ROOT" "$MIRROR" \
    > "$WORK/debootstrap.log" || { tail -20 "$WORK/debootstrap.log" >&2; exit 1; }

echo "==> configure: fstab, eth0 by DHCP, the vagrant user, first-boot SSH host keys"
echo "UUID=$UUID / ext4 errors=remount-ro 0 1" > "$ROOT/etc/fstab"
echo emu-lab > "$ROOT/etc/hostname"
printf 'auto lo\niface lo inet loopback\n\nauto eth0\niface eth0 inet dhcp\n' > "$ROOT/etc/network/interfaces"
chroot "$ROOT" useradd -m -s /bin/bash -G sudo vagrant
echo vagrant:vagrant | chroot "$ROOT" chpasswd
echo 'vagrant ALL=(ALL) NOPASSWD: ALL' > "$ROOT/etc/sudoers.d/vagrant"
chmod 440 "$ROOT/etc/sudoers.d/vagrant"
install -d -m 700 -o 1000 -g 1000 "$ROOT/home/vagrant/.ssh"
KEY=$(ls /usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant.pub | head -1)
install -m 600 -o 1000 -g 1000 "$KEY" "$ROOT/home/vagrant/.ssh/authorized_keys"
rm -f "$ROOT"/etc/ssh/ssh_host_*
cat > "$ROOT/etc/systemd/system/ssh-hostkeys.service" <<'EOF'
[Unit]
Description=Make the SSH host keys this box ships without
Before=ssh.service
[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A
[Install]
WantedBy=multi-user.target
EOF
ln -s /etc/systemd/system/ssh-hostkeys.service "$ROOT/etc/systemd/system/multi-user.target.wants/"
: > "$ROOT/etc/machine-id"
chroot "$ROOT" apt-get clean

echo "==> boot loader: extlinux"
KVER=$(basename "$(ls "$ROOT"/boot/vmlinuz-* | sort -V | tail -1)" | sed 's/^vmlinuz-//')
mkdir -p "$ROOT/boot/extlinux"
extlinux --install "$ROOT/boot/extlinux" 2>/dev/null
cat > "$ROOT/boot/extlinux/extlinux.conf" <<EOF
DEFAULT debian
TIMEOUT 1
LABEL debian
  LINUX /boot/vmlinuz-$KVER
  INITRD /boot/initrd.img-$KVER
  APPEND root=UUID=$UUID ro net.ifnames=0 console=tty0 console=ttyS0
EOF
umount "$ROOT" && losetup -d "$LOOP" && LOOP=
dd if="$MBR" of="$RAW" bs=440 count=1 conv=notrunc status=none

echo "==> pack the libvirt box and add it as $NAME"
qemu-img convert -O qcow2 "$RAW" "$WORK/box.img"
printf '{"provider": "libvirt", "format": "qcow2", "virtual_size": %d}\n' "$GB" > "$WORK/metadata.json"
cat > "$WORK/Vagrantfile" <<'EOF'
Vagrant.configure("2") do |config|
  config.vm.provider :libvirt do |libvirt|
    libvirt.driver = "kvm"
    libvirt.disk_bus = "virtio"
  end
end
EOF
tar -C "$WORK" -cSf "$WORK/emu-bookworm-local.box" metadata.json Vagrantfile box.img
vagrant box add --force --name "$NAME" "$WORK/emu-bookworm-local.box"
echo "==> box $NAME added (kernel $KVER): cd vagrant && EMU_BOX=local vagrant up --provider=libvirt"
