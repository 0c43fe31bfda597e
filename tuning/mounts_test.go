package tuning

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestParseMountinfo(t *testing.T) {
	text := `27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard,resv_strict
36 35 98:0 /mnt1 /mnt\0402 rw,noatime master:1 shared:7 - ext3 /dev/root rw,errors=continue
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 1 8:1 / /data\134x rw - xfs  rw
`
	mounts, err := ParseMountinfo(text)
	if err != nil {
		t.Fatal(err)
	}
	if len(mounts) != 4 {
		t.Fatalf("%d mounts, want 4: %+v", len(mounts), mounts)
	}
	root := mounts[0]
	if root.Dev != "254:0" || root.MountPoint != "/" || root.FSType != "ext4" || root.Source != "/dev/vda" ||
		!slices.Equal(root.Options, []string{"rw", "relatime"}) || !root.HasOption("discard") || root.HasOption("resv") {
		t.Errorf("root %+v", root)
	}
	if m := mounts[1]; m.MountPoint != "/mnt 2" || m.FSType != "ext3" || m.Source != "/dev/root" || !m.HasOption("noatime") || !m.HasOption("errors=continue") {
		t.Errorf("optional fields and escapes: %+v", m)
	}
	if m := mounts[3]; m.MountPoint != `/data\x` || m.Source != "" || m.FSType != "xfs" {
		t.Errorf("empty source, escaped backslash: %+v", m)
	}
	for _, bad := range []string{
		"27 1 254:0 / / rw,relatime ext4 /dev/vda rw",                                // no separator
		"27 1 254:0 / / rw - ext4 /dev/vda",                                          // no super options
		"27 1 254:0 / / rw - ext4 /dev/vda rw extra",                                 // a field too many
		"27 1 254 / / rw - ext4 /dev/vda rw",                                         // no minor
		"27 1 254:-1 / / rw - ext4 /dev/vda rw",                                      // negative minor
		"x 1 254:0 / / rw - ext4 /dev/vda rw",                                        // mount id
		"27 1 254:0 / rel rw - ext4 /dev/vda rw",                                     // relative mount point
		"27 1 254:0 / /a\\04 rw - ext4 /dev/vda rw",                                  // short escape
		"27 1 254:0 / /a\\999 rw - ext4 /dev/vda rw",                                 // not octal
		"27 1 254:0 / / rw - ext4 /dev/vda " + strings.Repeat("o,", mountOptionsMax), // too many options
		"27 1 254:0 / /" + strings.Repeat("a", mountinfoLineBytesMax) + " rw - ext4 /dev/vda rw",
		strings.Repeat("\n", mountinfoLinesMax+1),
	} {
		if mounts, err := ParseMountinfo(bad); !errors.Is(err, ErrBadMountinfo) {
			t.Errorf("ParseMountinfo(%q) = %+v, %v; want ErrBadMountinfo", clip(bad), mounts, err)
		}
	}
}

func TestDiscoverMounts(t *testing.T) {
	want := map[string][]Mount{
		// The real VM: only the block-device mount is kept, ext4 without a journal, discard.
		"vm2": {{Dev: "254:0", MountPoint: "/", FSType: "ext4", Source: "/dev/vda", Journal: "no"}},
		"numa2": {
			{Dev: "259:1", MountPoint: "/", FSType: "ext4", Source: "/dev/nvme0n1p1", Journal: "yes"},
			{Dev: "259:9", MountPoint: "/var/lib/ringlog", FSType: "xfs", Source: "/dev/nvme1n1p1"},
			{Dev: "259:9", MountPoint: "/run/ringlog data", FSType: "xfs", Source: "/dev/nvme1n1p1"},
		},
		"isol8": {{Dev: "259:1", MountPoint: "/", FSType: "ext4", Source: "/dev/nvme0n1p1", Journal: "yes"}},
	}
	for _, host := range fixtureHosts {
		topo := discoverFixture(t, host)
		if len(topo.Mounts) != len(want[host]) {
			t.Errorf("%s: mounts %+v, want %+v", host, topo.Mounts, want[host])
			continue
		}
		for i, m := range topo.Mounts {
			w := want[host][i]
			if m.Dev != w.Dev || m.MountPoint != w.MountPoint || m.FSType != w.FSType || m.Source != w.Source || m.Journal != w.Journal {
				t.Errorf("%s: mount %d %+v, want %+v", host, i, m, w)
			}
		}
	}
}

func TestPlanFileSystem(t *testing.T) {
	items := func(host string) map[string]Item {
		plan, err := BuildPlan(discoverFixture(t, host), PlanOptions{IRQMode: IRQModeShared, DataDevice: fixtureDataDevices[host]})
		if err != nil {
			t.Fatal(err)
		}
		found := map[string]Item{}
		for _, item := range plan.Items {
			if item.Kind == "fs" {
				found[item.Target] = item
			}
		}
		return found
	}
	vm2 := items("vm2")
	discard, journal := vm2["/ (ext4 on /dev/vda) discard"], vm2["/ (ext4 on /dev/vda) journal"]
	if discard.Action != ActionAdvise || discard.Important || !strings.Contains(discard.Why, "synchronously") {
		t.Errorf("vm2 discard item %+v", discard)
	}
	if journal.Action != ActionAdvise || journal.Important || journal.Current != "no journal" {
		t.Errorf("vm2 journal item %+v", journal)
	}
	numa2 := items("numa2")
	if len(numa2) != 1 || numa2["/run/ringlog data (xfs on /dev/nvme1n1p1) discard"].Action != ActionAdvise {
		t.Errorf("numa2 (xfs, discard, bind-mounted twice): %+v", numa2)
	}
	isol8 := items("isol8")
	if len(isol8) != 2 {
		t.Errorf("isol8: %+v", isol8)
	}
	for target, item := range isol8 {
		if item.Action != ActionKeep {
			t.Errorf("isol8 %s: %+v, want keep", target, item)
		}
	}
	// No mount of the device (mountinfo missing or the device not mounted): no fs items.
	topo := discoverFixture(t, "vm2")
	topo.Mounts = nil
	plan, err := BuildPlan(topo, PlanOptions{IRQMode: IRQModeShared, DataDevice: "254:0"})
	if err != nil {
		t.Fatal(err)
	}
	for _, item := range plan.Items {
		if item.Kind == "fs" {
			t.Errorf("fs item without a mount: %+v", item)
		}
	}
}

func FuzzParseMountinfo(f *testing.F) {
	for _, host := range fixtureHosts {
		real, _ := fixtureRoots(host).Resolve(mountinfoPath)
		if data, err := os.ReadFile(real); err == nil {
			f.Add(string(data))
		}
	}
	f.Add("36 35 98:0 /mnt1 /mnt\\0402 rw,noatime master:1 - ext3 /dev/root rw,errors=continue\n")
	f.Add("")
	f.Fuzz(func(t *testing.T, text string) {
		mounts, err := ParseMountinfo(text)
		if err != nil {
			if !errors.Is(err, ErrBadMountinfo) {
				t.Fatalf("error %v is not ErrBadMountinfo", err)
			}
			return
		}
		for _, m := range mounts {
			if again, err := parseDevNumber(m.Dev); err != nil || again != m.Dev {
				t.Fatalf("dev %q is not canonical: %q, %v", m.Dev, again, err)
			}
			if !strings.HasPrefix(m.MountPoint, "/") || m.FSType == "" || len(m.Options) == 0 || len(m.SuperOptions) == 0 {
				t.Fatalf("mount %+v from %q", m, text)
			}
		}
	})
}
