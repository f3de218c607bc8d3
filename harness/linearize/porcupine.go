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

// budgetPorcupineModel is the budget counter's model as porcupine checks
// it: one partition, as every call meets the others in the counter.
func budgetPorcupineModel(m *model.BudgetModel) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return model.BudgetState{} },
		Step: func(state, input, output any) (bool, any) {
			in, out := input.(model.BudgetInput), output.(model.BudgetOutput)
			want, next := m.Step(state.(model.BudgetState), in)
			if out.Maybe {
				return true, next
			}
			return want == out, next
		},
		Equal: func(a, b any) bool { return a.(model.BudgetState).Equal(b.(model.BudgetState)) },
		Hash:  func(s any) uint64 { return s.(model.BudgetState).Hash() },
		DescribeOperation: func(input, output any) string {
			return model.DescribeBudget(input.(model.BudgetInput), output.(model.BudgetOutput))
		},
		DescribeState: func(state any) string { return state.(model.BudgetState).String() },
	}
}
