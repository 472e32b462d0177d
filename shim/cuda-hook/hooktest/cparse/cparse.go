// Package cparse exposes the hook's C parsers (the TESSERA_* environment, the
// /proc/<pid>/stat line, the array size rule) to Go fuzz tests; cgo cannot be used
// in _test.go files. The C sources are compiled in from shim/cuda-hook/src.
package cparse

/*
#cgo CFLAGS: -std=c11 -D_GNU_SOURCE -I${SRCDIR}/../../include -I${SRCDIR}/../../src
#include <stdlib.h>
#include <string.h>
#include "../../src/log.c"
#include "../../src/config.c"
#include "../../src/region.c"

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
