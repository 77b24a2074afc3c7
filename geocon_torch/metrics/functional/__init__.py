"""Pure metric functions (background IR/GE, foreground AdaDFRC, epipolar trio)."""
