package journal

import (
	"fmt"

	"github.com/opjournal/opjournal/protocol/policy"
)

// CheckEnforced refuses a policy that asks for what this journal does not
// enforce yet: budgets. The policy language accepts them (and checks them
// at load) so that they can be written and reviewed ahead, but a journal
// that served such a policy would admit every payment its budgets were
// written to stop. opjournal serve calls it before anything listens.
func CheckEnforced(pol *policy.Policy) error {
	for _, name := range pol.Names() {
		if a, _ := pol.Action(name); len(a.Budgets) > 0 {
			return fmt.Errorf("actions.%s.budgets: budgets are checked by the policy language but not enforced by this journal yet; "+
				"remove the block to serve this policy (a budget that is not enforced would admit every operation it was written to stop)", a.Name)
		}
	}
	return nil
}
