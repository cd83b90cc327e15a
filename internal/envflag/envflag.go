package envflag

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"
)

// Set is a flag set whose flags may take their defaults from variables.
type Set struct {
	*flag.FlagSet
	// bad is each malformed variable, in the order of its flag.
	bad []badEnv
}

type badEnv struct {
	flag string
	err  error
}

// New is an empty set for the command name, which errors and usage name.
func New(name string) *Set {
	return &Set{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError)}
}

// FromEnv is the variable env parsed, or fallback when it is unset or
// empty. A value that does not parse is Parse's error, saying it is not
// want, unless the command line gives the flag name.
func FromEnv[T any](s *Set, name, env string, fallback T, parse func(string) (T, error), want string) T {
	v := os.Getenv(env)
	if v == "" {
		return fallback
	}
	x, err := parse(v)
	if err != nil {
		s.bad = append(s.bad, badEnv{name, fmt.Errorf("%s=%q is not %s", env, v, want)})
		return fallback
	}
	return x
}

// StringFromEnv defines a string flag whose default is env, or fallback.
func (s *Set) StringFromEnv(p *string, name, env, fallback, usage string) {
	if v := os.Getenv(env); v != "" {
		fallback = v
	}
	s.StringVar(p, name, fallback, usage)
}

// IntFromEnv defines an int flag whose default is env, or fallback.
func (s *Set) IntFromEnv(p *int, name, env string, fallback int, usage string) {
	s.IntVar(p, name, FromEnv(s, name, env, fallback, strconv.Atoi, "a whole number"), usage)
}

// DurationFromEnv defines a duration flag whose default is env, or
// fallback.
func (s *Set) DurationFromEnv(p *time.Duration, name, env string, fallback time.Duration, usage string) {
	s.DurationVar(p, name, FromEnv(s, name, env, fallback, time.ParseDuration, "a duration such as "+fallback.String()), usage)
}

// HiddenFromEnv defines a flag taken from env unless given. A Func flag
// has no default to print, so the usage text never shows the value taken
// from the environment: a password, a Redis URL holding one, a secret.
func (s *Set) HiddenFromEnv(p *string, name, env, usage string) {
	*p = os.Getenv(env)
	s.Func(name, usage, func(v string) error { *p = v; return nil })
}

// Given reports whether the command line set the flag.
func (s *Set) Given(name string) bool {
	set := false
	s.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// Parse parses args, then refuses a malformed variable whose flag was not
// given, and anything left after the flags.
func (s *Set) Parse(args []string) error {
	if err := s.FlagSet.Parse(args); err != nil {
		return err
	}
	for _, b := range s.bad {
		if !s.Given(b.flag) {
			return b.err
		}
	}
	return NoArgs(s.FlagSet, args)
}

// NoArgs refuses what is left on the command line after the flags of fs,
// without quoting it: a value split at a space, a password holding one,
// lands there, as does a Redis URL given without -redis.
func NoArgs(fs *flag.FlagSet, args []string) error {
	n := fs.NArg()
	if n == 0 {
		return nil
	}
	return fmt.Errorf("%s takes flags only, but %d unexpected argument(s) follow them, from argument %d on: give each flag as -name value before anything else, and quote a value that holds a space", fs.Name(), n, len(args)-n+1)
}
