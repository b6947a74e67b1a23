package config

import (
	"fmt"
	"strconv"
)

// Layers a value can come from, lowest first.
const (
	LayerDefault = "default"
	LayerProfile = "profile"
	LayerUser    = "user"
	LayerProject = "project"
	LayerConfig  = "config" // --config FILE
	LayerEnv     = "env"
	LayerFlag    = "flag"
)

// Source says where a resolved value came from.
type Source struct {
	Layer string // one of the Layer constants
	File  string // user, project and config layers
	Line  int    // line in File, 0 when unknown
	Name  string // the profile, the environment variable (SBX_X) or the flag (--x)
	// Note qualifies a derived default, e.g. "same as memory".
	Note string
}

// String renders the source as explain shows it: default, profile:common,
// project:/p/.sbx.yaml:3, env:SBX_MEMORY, flag:--memory.
func (s Source) String() string {
	var out string
	switch s.Layer {
	case LayerUser, LayerProject, LayerConfig:
		out = s.Layer + ":" + s.File
		if s.Line > 0 {
			out += ":" + strconv.Itoa(s.Line)
		}
	case LayerProfile, LayerEnv, LayerFlag:
		out = s.Layer + ":" + s.Name
	default:
		out = s.Layer
	}
	if s.Note != "" {
		out = fmt.Sprintf("%s (%s)", out, s.Note)
	}
	return out
}

// IsDefault reports whether the value is a built-in default, derived or not.
func (s Source) IsDefault() bool { return s.Layer == LayerDefault || s.Layer == "" }

func (s Source) at(line int) Source {
	s.Line = line
	return s
}
