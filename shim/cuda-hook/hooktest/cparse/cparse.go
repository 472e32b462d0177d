// Package cparse exposes the hook's C parsers (the TESSERA_* environment, the
// plugin's hook.conf, /proc/self/mountinfo lines, the /proc/<pid>/stat line, the
// array size rule) to Go fuzz tests; cgo cannot be used
// in _test.go files. The C sources are compiled in from shim/cuda-hook/src.
package cparse

/*
#cgo CFLAGS: -std=c11 -D_GNU_SOURCE -I${SRCDIR}/../../include -I${SRCDIR}/../../src
#include <stdlib.h>
#include <string.h>
#include "../../src/log.c"
#include "../../src/config.c"
#include "../../src/region.c"
#include "../../src/mountinfo.c"

static char **cparse_env;

static const char *cparse_getenv(const char *name)
{
	size_t n = strlen(name);
	for (char **e = cparse_env; e && *e; e++)
		if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
			return *e + n + 1;
	return NULL;
}

static int cparse_config(char **env, struct hook_config *c, char *err, size_t errlen)
{
	hook_log_threshold = -1;
	cparse_env = env;
	return config_parse(c, cparse_getenv, err, errlen);
}

static int cparse_hookconf(const char *text, size_t len, struct hook_config *c, char *err, size_t errlen)
{
	hook_log_threshold = -1;
	return config_parse_hookconf(c, text, len, err, errlen);
}
*/
import "C"

import (
	"errors"
	"unsafe"
)

// Config is what the hook makes of its environment.
type Config struct {
	Region, Limits, CoreLimits string // "" when unset
	CtxReserveBytes            uint64
	LogLevel                   int
}

// ParseConfig runs the hook's parser over env ("NAME=value" entries).
func ParseConfig(env []string) (Config, error) {
	cenv := make([]*C.char, len(env)+1)
	for i, e := range env {
		cenv[i] = C.CString(e)
		defer C.free(unsafe.Pointer(cenv[i]))
	}
	var cfg C.struct_hook_config
	var errbuf [512]C.char
	if C.cparse_config(&cenv[0], &cfg, &errbuf[0], C.size_t(len(errbuf))) != 0 {
		return Config{}, errors.New(C.GoString(&errbuf[0]))
	}
	out := Config{CtxReserveBytes: uint64(cfg.ctx_reserve_bytes), LogLevel: int(cfg.log_level)}
	if cfg.has_region {
		out.Region = C.GoString(&cfg.region_path[0])
	}
	if cfg.has_limits {
		out.Limits = C.GoString(&cfg.limits_path[0])
	}
	if cfg.has_core_limits {
		out.CoreLimits = C.GoString(&cfg.core_limits_path[0])
	}
	return out, nil
}

// ParseStat runs the hook's /proc/<pid>/stat parser.
func ParseStat(line string) (startTime uint64, zombie bool, ok bool) {
	cs := C.CString(line)
	defer C.free(unsafe.Pointer(cs))
	var st C.uint64_t
	var z C.bool
	if C.proc_stat_parse(cs, &st, &z) != 0 {
		return 0, false, false
	}
	return uint64(st), bool(z), true
}

// HookConf is what the hook makes of the plugin's hook.conf.
type HookConf struct {
	CtxReserveBytes uint64
	LogLevel        int
}

// ParseHookConf runs the hook's hook.conf parser over text.
func ParseHookConf(text string) (HookConf, error) {
	cs := C.CBytes([]byte(text + "\x00"))
	defer C.free(cs)
	var cfg C.struct_hook_config
	var errbuf [512]C.char
	if C.cparse_hookconf((*C.char)(cs), C.size_t(len(text)), &cfg, &errbuf[0], C.size_t(len(errbuf))) != 0 {
		return HookConf{}, errors.New(C.GoString(&errbuf[0]))
	}
	return HookConf{CtxReserveBytes: uint64(cfg.ctx_reserve_bytes), LogLevel: int(cfg.log_level)}, nil
}

// MountEntry is what the hook reads from one /proc/self/mountinfo line.
type MountEntry struct {
	ID           int
	Major, Minor uint
	ReadOnly     bool
	Root, Point  string
}

// ParseMountinfoLine runs the hook's mountinfo line parser.
func ParseMountinfoLine(line string) (MountEntry, bool) {
	cs := C.CBytes([]byte(line))
	defer C.free(cs)
	var e C.struct_mount_entry
	if C.mountinfo_parse_line((*C.char)(cs), C.size_t(len(line)), &e) != 0 {
		return MountEntry{}, false
	}
	return MountEntry{ID: int(e.id), Major: uint(e.major), Minor: uint(e.minor), ReadOnly: bool(e.read_only),
		Root: C.GoString(&e.root[0]), Point: C.GoString(&e.point[0])}, true
}

// MountinfoFindID and MountinfoHasPoint run the hook's lookups over text.
func MountinfoFindID(text string, id int) (MountEntry, bool) {
	cs := C.CString(text)
	defer C.free(unsafe.Pointer(cs))
	var e C.struct_mount_entry
	if C.mountinfo_find_id(cs, C.int(id), &e) != 0 {
		return MountEntry{}, false
	}
	return MountEntry{ID: int(e.id), Major: uint(e.major), Minor: uint(e.minor), ReadOnly: bool(e.read_only),
		Root: C.GoString(&e.root[0]), Point: C.GoString(&e.point[0])}, true
}

func MountinfoHasPoint(text, point string) bool {
	ct, cp := C.CString(text), C.CString(point)
	defer C.free(unsafe.Pointer(ct))
	defer C.free(unsafe.Pointer(cp))
	return bool(C.mountinfo_has_point(ct, cp))
}

// MountinfoHasRoot reports whether text mounts a path named name from below dir
// on major:minor (anyDir: from anywhere).
func MountinfoHasRoot(text, dir string, anyDir bool, major, minor uint, name string) bool {
	ct, cn := C.CString(text), C.CString(name)
	defer C.free(unsafe.Pointer(ct))
	defer C.free(unsafe.Pointer(cn))
	var cd *C.char
	if !anyDir {
		cd = C.CString(dir)
		defer C.free(unsafe.Pointer(cd))
	}
	return bool(C.mountinfo_has_root(ct, cd, C.uint(major), C.uint(minor), cn))
}
