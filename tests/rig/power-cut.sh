# The rig scenario of rig_rescue_claims_only_what_a_power_cut_left
# (tests/it/rig/scenarios.rs; docs/testing.md): power cuts in the middle of
# `btrfs-lab rescue --copy-to`, sourced by the guest's /init (busybox sh,
# rig_run/rig_note defined there).
#
# Drive 0: the source (btrfs, mounted ro at /src). Drive 1: the target's
# filesystem (/t; the copy goes to /t/out). Drive 2: btrfs-lab's state
# directory (/s/state, where the manifest lives, as /var/lib/btrfs-lab would
# be on the root filesystem). Drives 1 and 2 sit under device-mapper tables
# `tgt` and `st`: linear, or flakey with drop_writes (every write from then
# on is acknowledged and lost: a power cut as the filesystems see it).
# CUTS, set by the test before this script: "I:KIND:PERMILLE:JITTER_CS ..."
# (see run_cut).
export DM_DISABLE_UDEV=1
src=$(rig_dev 0)
tdev=$(rig_dev 1)
sdev=$(rig_dev 2)
now_cs() { read -r u rest </proc/uptime; echo "${u%.*}${u#*.}"; }
sleep_cs() { sleep "$(($1 / 100)).$(printf %02d $(($1 % 100)))"; }
table() {
    bd=$tdev
    [ "$1" = st ] && bd=$sdev
    sz=$(blockdev --getsz "$bd")
    if [ "$2" = linear ]; then
        echo "0 $sz linear $bd 0"
    else
        echo "0 $sz flakey $bd 0 0 1 1 drop_writes"
    fi
}
# A power cut of one table: suspended without freezing the filesystem
# (a freeze would sync it), every later write dropped.
drop() { dmsetup suspend --nolockfs "$1" && dmsetup load "$1" --table "$(table "$1" drop)" && dmsetup resume "$1"; }
restore() { dmsetup load "$1" --table "$(table "$1" linear)" && dmsetup resume "$1"; }
# The state directory's disk first: from then on no manifest line can
# land, while the target keeps at least what it had (a manifest never
# sees a later moment than the copies it claims).
cut_both() { drop st && drop tgt; }
setup() {
    dmsetup create tgt --table "$(table tgt linear)" &&
        dmsetup create st --table "$(table st linear)" &&
        mkfs.btrfs -q -f $src && mkfs.btrfs -q -f /dev/mapper/tgt && mkfs.btrfs -q -f /dev/mapper/st &&
        mkdir -p /src /t /s && mount -t btrfs $src /src &&
        mount -t btrfs /dev/mapper/tgt /t && mount -t btrfs /dev/mapper/st /s
}
rig_run setup setup
# 120 files in 4 directories, of 0 to 24 KiB but one of 1 MiB and a byte
# (two copy blocks: a cut inside a file); about 2.5 MB. The test
# throttles the source's reads (copies are read O_DIRECT), so that a whole
# copy takes a few seconds on any host: a few batches (a batch ends after
# 2 s).
fill() {
    d=0
    while [ $d -lt 4 ]; do
        mkdir /src/d$d
        f=0
        while [ $f -lt 30 ]; do
            n=$((d * 30 + f))
            s=$(((n * 7919 + 13) % 24577))
            case $n in 7) s=0 ;; 8) s=4096 ;; 60) s=1048577 ;; esac
            head -c $s /dev/urandom >/src/d$d/f$f
            f=$((f + 1))
        done
        d=$((d + 1))
    done
    sync && mount -o remount,ro /src && cd /src && find . -type f | sort | xargs sha256sum >/tmp/src.sums && cd /
}
rig_run fill fill
rig_run sums cat /tmp/src.sums
sed 's/^[^ ]*  //' /tmp/src.sums >/tmp/src.list
LAB="btrfs-lab rescue /src --copy-to /t/out --state-dir /s/state"
fresh() { rm -rf /t/out /s/state && sync; }
# The whole copy, no cut: how long one takes (the cut points are spread
# over it).
baseline() {
    fresh
    t0=$(now_cs)
    $LAB --json >/tmp/base.json
    rc=$?
    echo $(($(now_cs) - t0)) >/tmp/T
    tail -n 1 /tmp/base.json
    return $rc
}
rig_run baseline baseline
T=$(cat /tmp/T)
rig_note "a whole copy took $T cs"
# $hit: the system call number a thread of $1 is blocked in, when it is one
# of $2; false otherwise.
in_sys() {
    hit=
    for f in /proc/$1/task/*/syscall; do
        read -r nr rest <"$f" 2>/dev/null
        case " $2 " in *" $nr "*) hit=$nr; return 0 ;; esac
    done
    return 1
}
alive() {
    read -r _ _ state rest </proc/$1/stat 2>/dev/null || return 1
    [ "$state" != Z ]
}
# Waits (bounded) until $1 is blocked in one of the system calls $2;
# false when it ended first (or did not get there in 60 s).
wait_sys() {
    n=0
    while [ $n -lt 1200 ]; do
        in_sys "$1" "$2" && return 0
        alive "$1" || return 1
        sleep 0.05
        n=$((n + 1))
    done
    return 1
}
# One cut: a fresh copy, cut at the point KIND names, the run killed, both
# filesystems unmounted, their tables restored, mounted again. Kinds:
#   time      at PERMILLE of a whole copy's time, wherever the run is;
#   sync      the target's table suspended from PERMILLE of the time on (the
#             I/O in flight completes, later I/O waits), so the run blocks
#             in the syncfs that ends a batch: the batch's files written and
#             linked, its sync waiting; then JITTER_CS of that sync let
#             through before the cut;
#   lines     the state disk's table suspended from PERMILLE of the time on
#             (after the manifest's start): the run blocks in the fdatasync
#             of a batch's manifest lines (or the manifest's last fsync),
#             the batch's target sync done; then JITTER_CS of that sync let
#             through before the cut.
# A held point the run did not reach (it ended first) is tried again
# earlier (half the delay, then none).
run_cut() {
    i=$1 kind=$2 pm=$3 jit=$4
    tries=0
    while :; do
        fresh
        $LAB >/dev/null 2>/tmp/cut.err &
        pid=$!
        delay=$((T * pm / 1000))
        if [ $kind = lines ]; then
            # After the manifest's start (its header's directory entry synced):
            # the first directory of the copy is there.
            n=0
            while [ ! -d /t/out/d0 ] && alive $pid && [ $n -lt 600 ]; do sleep 0.05; n=$((n + 1)); done
        fi
        sleep_cs $delay
        case $kind in
            time)
                in_sys $pid "0 1 2 3 17 18 74 75 257 265 306 437" || hit=running
                cut_both
                at="at $delay cs (the run: $hit)"
                break
                ;;
            sync | lines)
                dev=tgt nrs=306
                [ $kind = lines ] && dev=st nrs="74 75"
                dmsetup suspend --nolockfs $dev
                if wait_sys $pid "$nrs"; then
                    if [ "$jit" -gt 0 ]; then
                        dmsetup resume $dev
                        sleep_cs "$jit"
                    fi
                    cut_both
                    at="held in system call $hit after $delay cs, $jit cs of it let through"
                    break
                fi
                dmsetup resume $dev
                wait $pid
                tries=$((tries + 1))
                [ $tries -ge 3 ] && pm=0 || pm=$((pm / 2))
                [ $tries -ge 5 ] && { at="never held"; cut_both; break; }
                ;;
        esac
    done
    kill -9 $pid 2>/dev/null
    wait $pid
    rig_note "cut $i: $kind $at; tries $tries"
    umount /t && umount /s &&
        blockdev --flushbufs /dev/mapper/tgt && blockdev --flushbufs /dev/mapper/st &&
        restore tgt && restore st &&
        mount -t btrfs /dev/mapper/st /s && mount -t btrfs /dev/mapper/tgt /t
}
manifests() {
    for f in /s/state/rescue/*/rescue-manifest.jsonl /s/state/rescue/*/.rescue-manifest.jsonl.new; do
        [ -f "$f" ] || continue
        echo "@@ ${f##*/}"
        cat "$f"
    done
}
copies() { [ -d /t/out ] && cd /t/out && find . -type f | sort | xargs -r sha256sum; cd /; }
resume_run() {
    $LAB --json >/tmp/resume.json
    rc=$?
    tail -n 1 /tmp/resume.json
    return $rc
}
# After the resumed copy: every source file's copy has the source's bytes,
# and there is nothing else (prints what differs).
final_check() {
    cd /t/out || return 1
    bad=$(sha256sum -c /tmp/src.sums 2>&1 | grep -v ': OK$')
    find . -type f | sed 's|^\./||' | sort >/tmp/have.list
    extra=$(sed 's|^\./||' /tmp/src.list | sort | diff - /tmp/have.list)
    cd /
    [ -z "$bad" ] && [ -z "$extra" ] && return 0
    echo "$bad"
    echo "$extra"
    return 1
}
for c in $CUTS; do
    IFS=: read -r i kind pm jit <<EOF
$c
EOF
    rig_run "cut-$i" run_cut "$i" "$kind" "$pm" "$jit"
    rig_run "claims-$i" manifests
    rig_run "copies-$i" copies
    rig_run "resume-$i" resume_run
    rig_run "final-$i" final_check
done
umount /t
umount /s
umount /src
