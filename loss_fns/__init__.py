"""prime-rl custom losses for the Composer 2.5 recipe.

Name a function here in ``[trainer.loss] type = "custom"``, e.g. ``import_path = "loss_fns.policy.dr_grpo"``.
Every loss has prime-rl's signature ``fn(inputs: LossInputs, **kwargs) -> LossOutputs`` and works on one sequence.
"""
