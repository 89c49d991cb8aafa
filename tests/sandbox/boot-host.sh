#!/usr/bin/env bash
# Runs inside `unshare --pid --fork --mount --uts --ipc --net --cgroup --propagation private`
# and turns the fresh namespaces into a host: private writable layers over everything that
# could leak to the real machine, a cgroup tree of its own, an sshd, then systemd as PID 1.
# Arguments come from the environment (set by tests/sandbox/fleet.py):
#   SBX_NAME SBX_CGROUP SBX_REPO SBX_LAYERS SBX_PUBKEY SBX_MACHINE_ID [SBX_EMULATOR SBX_PROFILE SBX_RELEASE]
# (SBX_RELEASE: the SGLang release the profile plays; its venv and checkout are the build's releases/<release>/.)
# SBX_LAYERS (a directory of the machine's) keeps the host's writable layers, so a host booted again on the
# same layers is the same host after a reboot: its /etc, /var, /opt... as it left them, /run and /tmp new.
set -euo pipefail

mount -t proc proc /proc
# Global sysctls live under /proc/sys: nothing inside a sandbox may change them.
mount --bind /proc/sys /proc/sys
mount -o remount,bind,ro /proc/sys

# The host's scratch (overlay upper layers, staging of /dev and cgroups) lives under this host's own
# /run, which no overlay below covers: a scratch under the checkout would vanish beneath the overlay of
# /root or /home, or the tmpfs of /tmp, wherever a user cloned the repository.
mount -t tmpfs -o mode=755,size=2g run /run
scratch=/run/llmops-sandbox
mkdir -m 700 "$scratch"
mount -t tmpfs -o mode=700,size=4g sandbox-scratch "$scratch"
mkdir -p "$scratch"/{layers,cg/systemd,cg/unified,dev,repo,emulator,inputs}
mount --bind "$SBX_LAYERS" "$scratch/layers"

# Everything the host reads from the machine is taken in now, before the overlays and tmpfs mounts
# below can hide its path: the checkout (read-only, put back at its own path afterwards), the emulator
# build and the small input files.
mount --bind "$SBX_REPO" "$scratch/repo"
mount -o remount,bind,ro "$scratch/repo"
if [[ -n ${SBX_EMULATOR:-} ]]; then
    mount --bind "$SBX_EMULATOR" "$scratch/emulator"
    mount -o remount,bind,ro "$scratch/emulator"
    install -m 644 "$SBX_PROFILE" "$scratch/inputs/profile.yaml"
fi
install -m 600 "$SBX_PUBKEY" "$scratch/inputs/authorized_keys"

# Only this host's cgroup subtrees, so its systemd never touches the machine's hierarchy roots.
mount --bind "/sys/fs/cgroup/systemd/$SBX_CGROUP" "$scratch/cg/systemd"
mount --bind "/sys/fs/cgroup/unified/$SBX_CGROUP" "$scratch/cg/unified"
# A sysfs of this network namespace, read-only like systemd-nspawn gives containers.
mount -t sysfs -o ro sysfs /sys
mount -t tmpfs -o mode=755 cgroup-root /sys/fs/cgroup
mkdir /sys/fs/cgroup/systemd /sys/fs/cgroup/unified
mount --move "$scratch/cg/systemd" /sys/fs/cgroup/systemd
mount --move "$scratch/cg/unified" /sys/fs/cgroup/unified

overlay() {  # overlay <lower> <mountpoint> <layer-name>
    mkdir -p "$scratch/layers/upper/$3" "$scratch/layers/work/$3" "$2"
    mount -t overlay overlay -o "lowerdir=$1,upperdir=$scratch/layers/upper/$3,workdir=$scratch/layers/work/$3" "$2"
}
for d in etc var opt srv root usr/local home; do
    overlay "/$d" "/$d" "${d//\//_}"
done
mount -t tmpfs -o mode=1777 tmp /tmp
mount -t tmpfs -o mode=1777 vartmp /var/tmp
# The checkout back at its own path (tests and playbooks name files in it), read-only.
mkdir -p "$SBX_REPO"
mount --move "$scratch/repo" "$SBX_REPO"

# A private /dev: journald would otherwise replace the machine's /dev/log, and Ray's
# object store would fill the machine's /dev/shm.
mount -t tmpfs -o mode=755,size=16m dev "$scratch/dev"
for node in null zero full random urandom tty; do
    touch "$scratch/dev/$node"
    mount --bind "/dev/$node" "$scratch/dev/$node"
done
mkdir "$scratch/dev/pts" "$scratch/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts "$scratch/dev/pts"
ln -s pts/ptmx "$scratch/dev/ptmx"
mount -t tmpfs -o mode=1777 shm "$scratch/dev/shm"
ln -s /proc/self/fd "$scratch/dev/fd"
ln -s /proc/self/fd/0 "$scratch/dev/stdin"
ln -s /proc/self/fd/1 "$scratch/dev/stdout"
ln -s /proc/self/fd/2 "$scratch/dev/stderr"
mount --move "$scratch/dev" /dev

# First boot only: a reboot finds what the host left (enabled units, host keys, machine id).
provision() {
# systemd: only sshd is enabled; everything that would reach the real machine is masked.
rm -rf /etc/systemd/system/*.wants /etc/systemd/system/default.target
mkdir -p /etc/systemd/system/multi-user.target.wants
ln -s /lib/systemd/system/ssh.service /etc/systemd/system/multi-user.target.wants/ssh.service
ln -s /lib/systemd/system/multi-user.target /etc/systemd/system/default.target
for unit in \
    systemd-tmpfiles-setup.service systemd-tmpfiles-clean.timer systemd-tmpfiles-setup-dev.service \
    systemd-tmpfiles-setup-dev-early.service systemd-sysctl.service systemd-binfmt.service \
    systemd-modules-load.service systemd-timesyncd.service proc-sys-fs-binfmt_misc.automount \
    proc-sys-fs-binfmt_misc.mount console-getty.service serial-getty@.service getty.target \
    getty@tty1.service getty-static.service systemd-remount-fs.service systemd-firstboot.service \
    apt-daily.timer apt-daily-upgrade.timer man-db.timer e2scrub_all.timer fstrim.timer \
    logrotate.timer dpkg-db-backup.timer kmod-static-nodes.service systemd-udevd.service \
    systemd-udev-trigger.service systemd-udev-settle.service systemd-udevd-control.socket \
    systemd-udevd-kernel.socket systemd-journald-audit.socket systemd-pstore.service \
    systemd-machine-id-commit.service systemd-logind.service systemd-hwdb-update.service \
    systemd-random-seed.service systemd-fsck-root.service systemd-quotacheck.service \
    systemd-repart.service systemd-pcrphase.service systemd-pcrphase-sysinit.service \
    keyboard-setup.service console-setup.service systemd-vconsole-setup.service \
    setvtrgb.service networking.service systemd-networkd.service systemd-ask-password-wall.path \
    systemd-ask-password-console.path dev-hugepages.mount dev-mqueue.mount \
    sys-fs-fuse-connections.mount sys-kernel-config.mount sys-kernel-debug.mount \
    sys-kernel-tracing.mount cryptsetup.target veritysetup.target integritysetup.target \
    swap.target postgresql.service cron.service rsyslog.service; do
    ln -sfn /dev/null "/etc/systemd/system/$unit"
done
mkdir -p /etc/systemd/journald.conf.d
cat > /etc/systemd/journald.conf.d/llmops-sandbox.conf <<'EOF'
# Test hosts keep every line: integration tests fill journals on purpose.
[Journal]
Storage=volatile
RateLimitBurst=0
RuntimeMaxUse=1G
EOF

# sshd with this fleet's test key only.
rm -f /etc/ssh/ssh_host_*
ssh-keygen -A >/dev/null
mkdir -p /etc/ssh/sshd_config.d
cat > /etc/ssh/sshd_config.d/llmops-sandbox.conf <<'EOF'
PermitRootLogin prohibit-password
PasswordAuthentication no
UseDNS no
MaxStartups 200:30:400
MaxSessions 200
EOF
echo "$SBX_MACHINE_ID" > /etc/machine-id
touch /etc/llmops-sandbox-provisioned
}
[[ -e /etc/llmops-sandbox-provisioned ]] || provision
rm -rf /root/.ssh
mkdir -m 700 /root/.ssh
install -m 600 "$scratch/inputs/authorized_keys" /root/.ssh/authorized_keys

# The emulated GPU node, installed where the real programs live.
if [[ -n ${SBX_EMULATOR:-} ]]; then
    # One writable layer per release: what a run wrote into one release's venv (tuned MoE configs) is not
    # in another's when a reboot changes the host's release (Fleet.reboot with a profile).
    overlay "$scratch/emulator/releases/$SBX_RELEASE/venv" /opt/sglang/venv "sglang_venv-$SBX_RELEASE"
    overlay "$scratch/emulator/releases/$SBX_RELEASE/src" /opt/sglang/src "sglang_src-$SBX_RELEASE"
    overlay "$scratch/emulator/models" /srv/models models
    # Every emulated release as wheels, as an air-gapped fleet keeps its wheelhouse (llmops.sglang.sglang_release).
    overlay "$scratch/emulator/wheelhouse" /srv/wheelhouse wheelhouse
    install -m 755 "$scratch/emulator/bin/nvidia-smi" /usr/local/bin/nvidia-smi
    install -D -m 644 "$scratch/inputs/profile.yaml" /etc/sglang-emulator/profile.yaml
fi

hostname "$SBX_NAME"
echo "$SBX_NAME" > /etc/hostname
mount --make-rshared /
exec env -i container=llmops-sandbox PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /lib/systemd/systemd --log-target=console --show-status=no
