"""Custom pyinfra operations: read one batched fact, yield only the commands needed."""
