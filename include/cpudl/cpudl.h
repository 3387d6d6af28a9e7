// Everything a cpudl program needs: tensors, autograd, ops, modules, optimisers, data and files.
#pragma once

#include "cpudl/autograd.h"
#include "cpudl/data.h"
#include "cpudl/error.h"
#include "cpudl/inference.h"
#include "cpudl/io.h"
#include "cpudl/nn.h"
#include "cpudl/ops.h"
#include "cpudl/optim.h"
#include "cpudl/runtime.h"
#include "cpudl/tensor.h"
