package linearize

import (
	"fmt"

	"github.com/anishathalye/porcupine"

	"github.com/opjournal/opjournal/protocol/model"
)

// porcupineModel is the protocol's model as porcupine checks it, partitioned
// by operation key.
func porcupineModel(m *model.Model) porcupine.Model {
	return porcupine.Model{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			by := map[string][]porcupine.Operation{}
			var keys []string
			for _, op := range history {
				k := op.Input.(model.Input).Key
				if _, ok := by[k]; !ok {
					keys = append(keys, k)
				}
				by[k] = append(by[k], op)
			}
			out := make([][]porcupine.Operation, 0, len(keys))
			for _, k := range keys {
				out = append(out, by[k])
			}
			return out
		},
		Init: func() any { return model.State{} },
		Step: func(state, input, output any) (bool, any) {
			in, out := input.(model.Input), output.(model.Output)
			want, next := m.Step(state.(model.State), in)
			if out.Maybe {
				return true, next
			}
			return model.Agree(want, out, in.Now != model.TimeUnknown), next
		},
		DescribeOperation: func(input, output any) string { return model.Describe(input.(model.Input), output.(model.Output)) },
		DescribeState: func(state any) string {
			s := state.(model.State)
			if !s.Exists {
				return "absent"
			}
			return fmt.Sprintf("%+v", s)
		},
	}
}
