# Usage: dump_tensors.py <file.gguf> <outdir>
# Dumps each 2-D tensor of a GGUF as <name>.<type id>.<ne0>.<ne1>.bin (raw bytes) for check.cpp.
import struct, sys, os
d=open(sys.argv[1],'rb').read(); outdir=sys.argv[2]; os.makedirs(outdir,exist_ok=True)
off=0
def rd(fmt):
    global off
    v=struct.unpack_from('<'+fmt,d,off); off+=struct.calcsize('<'+fmt); return v
def rstr():
    global off
    (n,)=rd('Q'); s=d[off:off+n]; off+=n; return s.decode()
def skipval(t):
    global off
    if t==8: rstr(); return
    if t==9:
        (et,n)=rd('IQ'); [skipval(et) for _ in range(n)]; return
    off+=struct.calcsize('<'+{0:'B',1:'b',2:'H',3:'h',4:'I',5:'i',6:'f',7:'?',10:'Q',11:'q',12:'d'}[t])
magic,ver=rd('4sI'); nt,nkv=rd('QQ')
align=32
for i in range(nkv):
    k=rstr(); (t,)=rd('I')
    if k=='general.alignment': (align,)=rd('I')
    else: skipval(t)
ts=[]
for i in range(nt):
    n=rstr(); (nd,)=rd('I'); ne=rd('Q'*nd); (ty,o)=rd('IQ'); ts.append((n,ne,ty,o))
base=(off+align-1)//align*align
sizes={0:(1,4),1:(1,2),2:(32,18),3:(32,20),6:(32,22),7:(32,24),8:(32,34),10:(256,84),11:(256,110),12:(256,144),13:(256,176),14:(256,210),30:(1,2)}
for n,ne,ty,o in ts:
    if len(ne)!=2: continue
    bs,tsz=sizes[ty]; nb=ne[0]*ne[1]//bs*tsz
    open(f'{outdir}/{n}.{ty}.{ne[0]}.{ne[1]}.bin','wb').write(d[base+o:base+o+nb])
    print(n,ne,ty)
