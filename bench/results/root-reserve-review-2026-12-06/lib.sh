# common helpers: source me
B=/var/tmp/review34/ext4lazy
W=/var/tmp/review34
NOBODY="setpriv --reuid=65534 --regid=65534 --clear-groups"
mkimg() { # img sizeM mkfsopts...
  local img=$1 sz=$2; shift 2; rm -f $img; truncate -s ${sz}M $img; mkfs.ext4 -F -q "$@" $img; }
mnt_lazy() { mkdir -p $2; $B mount -o rw,allow_other,default_permissions${3:+,$3} $1 $2 && chmod 777 $2 || exit 1; }
mnt_kern() { mkdir -p $2; mount -o loop${3:+,$3} $1 $2 && chmod 777 $2 || exit 1; }
um_lazy() { $B umount $1; echo "umount rc=$?"; }
um_kern() { umount $1; }
fsck() { e2fsck -fn $1 >/tmp/fsck.$$ 2>&1; local rc=$?; echo "e2fsck rc=$rc"; [ $rc -ne 0 ] && cat /tmp/fsck.$$; rm -f /tmp/fsck.$$; }
fillcmd='dd if=/dev/zero of="$0" bs=64k status=none; dd if=/dev/zero of="$0" bs=4k oflag=append conv=notrunc status=none; sync "$0"; stat -c %s "$0"'
fillcmd='dd if=/dev/zero of="$0" bs=64k status=none; dd if=/dev/zero of="$0" bs=4k oflag=append conv=notrunc status=none; dd if=/dev/zero of="$0" bs=1k oflag=append conv=notrunc status=none; sync "$0"; stat -c %s "$0"'
