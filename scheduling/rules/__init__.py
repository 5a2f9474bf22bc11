"""The rules of a valid job: validation, who may target what, the allowlists, argument limits."""
